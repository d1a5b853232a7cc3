"""A tiny typed registry: every pluggable choice (backends, inferers, samplers) is looked up by name here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from gustforge.errors import RegistryError

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Name → implementation map. Duplicate names raise; unknown names raise with the valid choices.

    Example:
        >>> backends: Registry[int] = Registry("backend")
        >>> backends.add("one", 1)
        >>> backends.get("one")
        1
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def add(self, name: str, item: T) -> None:
        if name in self._items:
            raise RegistryError(f"{self.kind} {name!r} is already registered")
        self._items[name] = item

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of `add`."""

        def decorate(item: T) -> T:
            self.add(name, item)
            return item

        return decorate

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            valid = ", ".join(sorted(self._items)) or "(none)"
            raise RegistryError(f"unknown {self.kind} {name!r}; valid: {valid}") from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))
