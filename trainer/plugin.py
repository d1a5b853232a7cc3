"""verl plugin entry point (``[project.entry-points."verl.plugins"] gustforge = "trainer.plugin"``).

``import verl`` loads every ``verl.plugins`` entry point in every process that imports it (driver,
TaskRunner, actor and agent-loop workers), so importing `trainer.estimators` here registers ``slca``,
``tara``, ``slca_tara`` and ``toolpo`` wherever verl looks them up, and `trainer.v1_trainer` registers the
``gust_sync`` trainer in the TaskRunner before ``TaskRunnerV1.run`` calls ``get_trainer_cls``. verl swallows
a failing plugin with a DEBUG log; `tests/trainer/test_plugin.py` therefore asserts the registration in a fresh
interpreter.

The plain ``import`` (not ``from ... import name``) matters: when user code imports `trainer.estimators`
first, verl's ``__init__`` runs this plugin while `trainer.estimators` is still half-initialised, and a
name import would fail there; the estimators then register once their own import completes.
"""

from __future__ import annotations

import trainer.estimators  # noqa: F401  (registers the estimators on import)
import trainer.v1_trainer  # noqa: F401  (registers the gust_sync V1 trainer before TaskRunnerV1 looks it up)

__all__: list[str] = []
