"""Dynamic Unlocking Sampling (ToolVerse §3.2.2) and coverage-oriented skeleton sampling (App. B.3).

DUS keeps a ready queue Q of tools whose requirements are met, starting from the zero in-degree roots. Each stage
samples k = min(|Q|, N) tools from Q; after the stage runs, a tool joins Q once its requirements are met. With
``linked`` (the default, `TDGConfig.linked_stages`) a stage after the first samples only from the tools the run
unlocked while there are any, so its tools receive what earlier stages produced instead of sharing the stage with
unrelated roots; roots are sampled again only when nothing is unlocked. A
tool's requirements are its arguments, not its predecessors: parameter edges that provide the same argument are
alternatives (one executed provider suffices), each semantic edge (no argument named) is a requirement of its own.
So every tool of a stage has a provider of each of its dependency arguments in an earlier stage, and no skeleton
grows long chains of redundant reads just because several tools return the same field.

Terminal tools (a delete, or a name that cancels / closes / archives ...) end a skeleton: one is sampled only when
the skeleton would otherwise end, and as the only tool of the final stage, so no call acts on a record after it.

The paper does not say when a skeleton ends. Here it ends when Q is empty, when `max_stages` stages exist, after a
terminal tool, or when Q holds only roots that were ready from the start while no tool is partly unlocked (nothing
left depends on what ran, so more stages would only append unrelated calls). Consequently a graph without edges
yields single-stage skeletons; `sample_skeletons_for_coverage` rejects single-stage skeletons of a graph that has
edges.

Goal-first sampling (`sample_goal_skeleton`, the default of `sample_skeletons_for_coverage`; issue 20) turns
DUS around: it draws the goal (a tool with requirements, writes preferred) and then exactly one provider per
requirement group, recursively, so no stage holds a ready tool that serves no goal; tools the planned providers
also unlock may join as further goals. Its stages are the levels of the provider chains.

`sample_skeletons_for_coverage` repeats DUS over an environment's DAGs (round-robin), weighting tools toward the
not-yet-covered ones (and toward tools with uncovered descendants), until coverage reaches the target, stops
improving for `patience` skeletons, or `max_skeletons` is reached. `random_walk_skeleton` is the baseline.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Collection, Mapping, Sequence

import networkx as nx
from pydantic import Field

from data.models import Skeleton, StrictModel
from gustforge.errors import InputError, TDGCycleError
from tdg.fields import parse_evidence, path_leaf

__all__ = [
    "CoverageResult",
    "sample_skeleton",
    "sample_skeletons_for_coverage",
    "random_walk_skeleton",
    "skeleton_tools",
    "coverage_weights",
    "requirements",
    "is_terminal_tool",
    "sample_goal_skeleton",
]

_UNCOVERED_BONUS = 4.0
_TERMINAL_VERBS = frozenset(
    "delete remove cancel close archive terminate revoke void refund reject deactivate disable unsubscribe "
    "discard destroy purge end".split()
)


def is_terminal_tool(dag: nx.DiGraph, tool: str) -> bool:
    """A delete, or a tool whose name starts with a terminal verb (cancel_order, close_ticket, archiveNote)."""
    if str(dag.nodes[tool].get("kind", "")) == "delete":
        return True
    first = re.split(r"[_\-\s.]+|(?<=[a-z])(?=[A-Z])", tool)[0].lower()
    return first in _TERMINAL_VERBS


def echoes_input(dag: nx.DiGraph, provider: str, path: str) -> bool:
    """The response field `path` of `provider` hands back one of its required arguments (``get_price(symbol)`` ->
    ``price.symbol``, ``list_orders(customer_id)`` -> ``orders[].customer_id``): whoever calls the provider already
    has the value, so an edge through it carries no information (the agent could use the stated value directly)."""
    parameters = dag.nodes[provider].get("parameters") or {}
    required = {str(name).casefold() for name in parameters.get("required") or ()}
    leaf = path_leaf(path).casefold()
    return leaf in required


def informative_edge_count(dag: nx.DiGraph) -> int:
    """Edges of `dag` through which a provider hands on a value its caller did not have (`requirements`)."""
    return sum(len(group) for node in dag.nodes for group in requirements(dag, node, informative=True))


def requirements(dag: nx.DiGraph, tool: str, *, informative: bool = False) -> list[frozenset[str]]:
    """Groups of predecessors of `tool`; one executed member per group unlocks it.

    Parameter edges are grouped by the argument their evidence names (alternative providers); an edge without a
    parsable argument is its own group. `informative` keeps only evidence through which a value flows that the
    provider's caller did not already have (`echoes_input`); an edge whose every mapping is an echo then provides
    nothing.
    """
    by_param: dict[str, set[str]] = {}
    singles: list[frozenset[str]] = []
    for pred in sorted(dag.predecessors(tool)):
        evidence = [ev for ev in parse_evidence(str(dag.edges[pred, tool].get("evidence") or ""))
                    if ev.dst == tool and ev.src == pred]  # fmt: skip
        params = {ev.param for ev in evidence if not (informative and echoes_input(dag, pred, ev.path))}
        if evidence and not params:
            continue
        if not params:
            singles.append(frozenset({pred}))
        for param in params:
            by_param.setdefault(param, set()).add(pred)
    return [frozenset(g) for _, g in sorted(by_param.items())] + singles


class CoverageResult(StrictModel):
    """The skeletons sampled for one environment and the share of its tools they cover."""

    env_id: str
    skeletons: tuple[Skeleton, ...]
    covered: tuple[str, ...] = Field(description="Tools used by at least one skeleton, sorted.")
    total: int = Field(description="Tools in the environment (union of the DAGs' nodes).")
    coverage: float = Field(description="len(covered) / total (1.0 for an empty environment).")


def _weighted_sample(items: Sequence[str], k: int, weights: Mapping[str, float], rng: random.Random) -> list[str]:
    """k distinct items, P proportional to weight (Efraimidis-Spirakis keys u^(1/w)); deterministic per rng."""
    keyed = sorted(((rng.random() ** (1.0 / max(weights.get(i, 1.0), 1e-9)), i) for i in items), reverse=True)
    return [item for _, item in keyed[:k]]


def _stalled(ready: set[str], roots: set[str], partly: bool) -> bool:
    """Only untouched roots are ready and no tool is partly unlocked: nothing left depends on what ran."""
    return ready <= roots and not partly


def sample_skeleton(
    dag: nx.DiGraph,
    *,
    max_parallel: int = 3,
    max_stages: int = 6,
    seed: int = 0,
    weights: Mapping[str, float] | None = None,
    env_id: str | None = None,
    graph_index: int | None = None,
    linked: bool = True,
) -> Skeleton:
    """One DUS skeleton over `dag`.

    Args:
        dag: A sanitized TDG (must be acyclic).
        max_parallel: N, the most tools per stage (k = min(|Q|, N)).
        max_stages: The most stages.
        seed: Seeds the sampler; equal inputs give equal skeletons.
        weights: Optional sampling weight per tool (default 1.0); used to steer toward uncovered tools.
        env_id: Defaults to ``dag.graph["env_id"]``.
        graph_index: Defaults to ``dag.graph["graph_index"]``.
        linked: After the first stage, sample only from the tools the run so far unlocked (tools with
            requirements, all met) while there are any, so a stage does not mix them with unrelated roots that
            receive nothing; roots are sampled again only when nothing is unlocked (to unlock a join). False: the
            paper's plain k = min(|Q|, N) from the whole ready queue.

    Returns:
        The skeleton; each stage's tools are sorted by name.

    Raises:
        TDGCycleError: `dag` has a cycle.
        InputError: `max_parallel` or `max_stages` is below 1.
    """
    if max_parallel < 1 or max_stages < 1:
        raise InputError(f"max_parallel and max_stages must be >= 1 (got {max_parallel}, {max_stages})")
    if not nx.is_directed_acyclic_graph(dag):
        raise TDGCycleError("DUS needs a DAG; run tdg.sanitize.sanitize_to_dag first")
    rng = random.Random(seed)
    groups = {node: requirements(dag, node) for node in dag.nodes}
    roots = {n for n, g in groups.items() if not g}
    terminal = {n for n in dag.nodes if is_terminal_tool(dag, n)}
    ready = set(roots)
    done: set[str] = set()
    stages: list[tuple[str, ...]] = []
    lead = {n: (weights or {}).get(n, 1.0) * (4.0 if dag.out_degree(n) else 1.0) for n in dag.nodes}
    while ready and len(stages) < max_stages:
        partly = any(n not in done and any(g & done for g in groups[n]) for n in dag.nodes if n not in ready)
        open_ = sorted(ready - terminal)
        stalled = bool(stages) and _stalled(set(open_), roots, partly)
        final_slot = len(stages) == max_stages - 1
        finale = sorted(ready & terminal - roots) if stages else sorted(ready & terminal) if not open_ else []
        if (not open_ or stalled or final_slot) and finale:
            stages.append(tuple(_weighted_sample(finale, 1, weights or {}, rng)))
            break
        if not open_ or stalled:
            break
        unlocked = [t for t in open_ if t not in roots]
        pool = unlocked if linked and stages and unlocked else open_
        chosen = _weighted_sample(pool, min(len(pool), max_parallel), lead if not stages else weights or {}, rng)
        stages.append(tuple(sorted(chosen)))
        ready.difference_update(chosen)
        done.update(chosen)
        for tool in chosen:
            for succ in dag.successors(tool):
                if succ not in done and succ not in ready and all(g & done for g in groups[succ]):
                    ready.add(succ)
    return Skeleton(
        env_id=env_id if env_id is not None else str(dag.graph.get("env_id", "")),
        graph_index=graph_index if graph_index is not None else int(dag.graph.get("graph_index", 0)),
        stages=tuple(stages),
        seed=seed,
    )


_WRITE_BONUS = 6.0


def _providers_for(
    dag: nx.DiGraph, tool: str, groups: Mapping[str, list[frozenset[str]]], plan: dict[str, int], budget: int,
    terminal: set[str], weights: Mapping[str, float], rng: random.Random,
) -> bool:  # fmt: skip
    """Add to `plan` (tool -> level) one provider per unmet requirement group of `tool`, recursively, so `tool`
    sits at most at level `budget - 1`; False (plan unchanged) when some group has no provider that fits."""
    trial = dict(plan)
    for group in groups[tool]:
        if group & set(trial):
            continue
        options = sorted(group - terminal - {tool})
        order = _weighted_sample(options, len(options), weights, rng)
        for provider in order:
            attempt = dict(trial)
            attempt[provider] = -1
            if budget > 1 and _providers_for(dag, provider, groups, attempt, budget - 1, terminal, weights, rng):
                trial = attempt
                break
        else:
            return False
    plan.clear()
    plan.update(trial)
    return True


def _levels(plan: set[str], groups: Mapping[str, list[frozenset[str]]], dag: nx.DiGraph) -> dict[str, int]:
    """Level of each planned tool: 1 + the highest level of its planned predecessors (0 without any)."""
    level: dict[str, int] = {}
    for tool in nx.topological_sort(dag.subgraph(plan)):
        preds = [p for g in groups[tool] for p in g if p in plan]
        level[tool] = 1 + max((level[p] for p in preds), default=-1)
    return level


def sample_goal_skeleton(
    dag: nx.DiGraph,
    *,
    max_parallel: int = 3,
    max_stages: int = 6,
    seed: int = 0,
    weights: Mapping[str, float] | None = None,
    env_id: str | None = None,
    graph_index: int | None = None,
    uncovered: Collection[str] | None = None,
) -> Skeleton:
    """Goal-first DUS: draw the goal, then exactly the providers it needs (issue 20).

    The goal is a tool with requirements (weighted by `weights`, x6 for a write or a tool a write can feed, so
    tasks change state where they can); for each of its requirement groups one provider is drawn (writes x6; a
    provider already planned is reused; no terminal tool provides), recursively, within `max_stages` levels. Up
    to `max_parallel - 1` more goals then join when everything they need is already planned (they share the
    providers, not unrelated roots): every such write, and a read with probability 1/2 while the plan holds no
    write. Every tool of the skeleton is a goal or provides a value to a later tool; stages are the levels of the
    provider chains, so independent tools share a stage. A graph without edges yields one-tool skeletons (a tool
    without edges in a graph with edges is never drawn: it serves no goal next to others).

    `uncovered` (the tools no earlier skeleton of the environment used; `sample_skeletons_for_coverage`) keeps
    DUS's coverage role: goals are drawn among the uncovered tools with requirements first (a goal and the
    providers it needs covers them all), and the free slots of the plan (up to `max_parallel` goals) take
    uncovered tools without requirements that nothing planned needs as further requested goals at the first level
    ("tell me X and also Y": independent requested calls, not filler), so tools without edges are covered too.

    Raises:
        TDGCycleError: `dag` has a cycle.
        InputError: `max_parallel` or `max_stages` is below 1.
    """
    if max_parallel < 1 or max_stages < 1:
        raise InputError(f"max_parallel and max_stages must be >= 1 (got {max_parallel}, {max_stages})")
    if not nx.is_directed_acyclic_graph(dag):
        raise TDGCycleError("DUS needs a DAG; run tdg.sanitize.sanitize_to_dag first")
    rng = random.Random(seed)
    weights = weights or {}
    groups = {node: requirements(dag, node, informative=True) for node in dag.nodes}
    terminal = {n for n in dag.nodes if is_terminal_tool(dag, n)}
    writes = {n for n in dag.nodes if str(dag.nodes[n].get("kind", "read")) != "read"}
    stateful = writes | {n for n in dag.nodes if set(dag.predecessors(n)) & writes}  # a write or fed by one
    goal_weight = {n: weights.get(n, 1.0) * (_WRITE_BONUS if n in stateful else 1.0) for n in dag.nodes}
    provider_weight = {n: weights.get(n, 1.0) * (_WRITE_BONUS if n in writes else 1.0) for n in dag.nodes}
    candidates = sorted(n for n in dag.nodes if groups[n]) or sorted(dag.nodes)
    order = _weighted_sample(candidates, len(candidates), goal_weight, rng)
    if uncovered is not None:  # uncovered goals first, state-changing ones first among them (stable otherwise)
        order = sorted(order, key=lambda n: (n not in uncovered, n not in stateful))
    plan: dict[str, int] = {}
    goals: list[str] = []
    for goal in order:
        trial: dict[str, int] = {goal: -1}
        if (_providers_for(dag, goal, groups, trial, max_stages, terminal, provider_weight, rng)
                and max(_levels(set(trial), groups, dag).values()) < max_stages):  # a reused provider may sit deeper
            plan, goals = trial, [goal]
            break
    if goals and goals[0] not in terminal:
        extra = [n for n in sorted(dag.nodes) if n not in plan and groups[n] and n not in terminal
                 and all(g & set(plan) for g in groups[n])]  # fmt: skip
        for tool in _weighted_sample(extra, len(extra), goal_weight, rng)[: max_parallel - 1]:
            if tool in writes or (not writes & set(plan) and rng.random() < 0.5):  # a write always joins; a read
                # only a read-only task (facts to report), not a state change's task
                plan[tool] = -1
                if max(_levels(set(plan), groups, dag).values()) >= max_stages:  # it would open a stage too many
                    del plan[tool]
        if uncovered is not None:
            joined = sum(1 for n in plan if not set(dag.successors(n)) & set(plan))  # goals of the plan so far
            free = [n for n in sorted(uncovered) if n in dag.nodes and n not in plan and not groups[n]
                    and n not in terminal and not set(dag.successors(n)) & set(plan)]  # fmt: skip
            for tool in _weighted_sample(free, len(free), goal_weight, rng)[: max(0, max_parallel - joined)]:
                plan[tool] = -1
    levels = _levels(set(plan), groups, dag) if plan else {}
    depth = 1 + max(levels.values(), default=-1)
    stages = tuple(tuple(sorted(t for t, lv in levels.items() if lv == i)) for i in range(depth))
    return Skeleton(
        env_id=env_id if env_id is not None else str(dag.graph.get("env_id", "")),
        graph_index=graph_index if graph_index is not None else int(dag.graph.get("graph_index", 0)),
        stages=tuple(s for s in stages if s),
        seed=seed,
    )


def skeleton_tools(skeleton: Skeleton) -> set[str]:
    """Every tool a skeleton calls."""
    return {tool for stage in skeleton.stages for tool in stage}


def coverage_weights(dag: nx.DiGraph, covered: set[str]) -> dict[str, float]:
    """Sampling weight per tool: 1 + a bonus if uncovered + log(1 + its uncovered descendants)."""
    weights = {}
    for node in dag.nodes:
        pending = len(nx.descendants(dag, node) - covered)
        weights[node] = 1.0 + (_UNCOVERED_BONUS if node not in covered else 0.0) + math.log1p(pending)
    return weights


def sample_skeletons_for_coverage(
    dags: Sequence[nx.DiGraph],
    *,
    env_id: str,
    target_coverage: float = 1.0,
    max_skeletons: int = 15,
    min_skeletons: int = 1,
    patience: int = 4,
    max_parallel: int = 3,
    max_stages: int = 6,
    seed: int = 0,
    linked: bool = True,
    goal_first: bool = True,
) -> CoverageResult:
    """Sample DUS skeletons over an environment's DAGs until its tools are covered (App. B.3).

    Round-robin over `dags` that have edges (informative ones, `informative_edge_count`, when `goal_first`; an
    edgeless graph only yields single-stage skeletons of unrelated calls, so it is sampled only when no graph of
    the env has an edge); each skeleton is biased toward tools no
    earlier skeleton used. Duplicate skeletons (same graph and stages) are skipped and count as attempts without
    progress.

    Args:
        dags: The environment's sanitized TDGs (``graph_index`` taken from each graph, else its position).
        env_id: The environment.
        target_coverage: Stop once covered/total reaches this (after `min_skeletons`).
        max_skeletons: Most skeletons returned.
        min_skeletons: Keep sampling at least this many distinct skeletons even when the target is reached
            (more tasks per environment), still bounded by `patience`.
        patience: Stop after this many consecutive attempts that add no newly covered tool.
        max_parallel: N of DUS.
        max_stages: Stage limit of DUS.
        seed: Base seed; skeleton i gets a seed drawn from ``random.Random(seed)``.
        linked: See `sample_skeleton` (the paper's DUS, used when not `goal_first`).
        goal_first: Sample with `sample_goal_skeleton` (a goal and exactly the providers it needs).

    Returns:
        `CoverageResult` for `env_id`.
    """
    nodes = {n for dag in dags for n in dag.nodes}
    edges = [informative_edge_count(dag) if goal_first else dag.number_of_edges() for dag in dags]
    indexed = [(i, dag) for i, dag in enumerate(dags) if edges[i] > 0] or list(enumerate(dags))
    rng = random.Random(seed)
    skeletons: list[Skeleton] = []
    seen: set[tuple[int, tuple[tuple[str, ...], ...]]] = set()
    covered: set[str] = set()
    stale, attempt = 0, 0
    while indexed and len(skeletons) < max_skeletons and stale < patience:
        reached = len(covered) / len(nodes) >= target_coverage if nodes else True
        if reached and len(skeletons) >= min_skeletons:
            break
        index, dag = indexed[attempt % len(indexed)]
        attempt += 1
        common = {"max_parallel": max_parallel, "max_stages": max_stages, "seed": rng.randrange(2**31),
                  "weights": coverage_weights(dag, covered), "env_id": env_id,
                  "graph_index": int(dag.graph.get("graph_index", index))}  # fmt: skip
        uncovered = {n for n in dag.nodes if n not in covered}
        skeleton = (sample_goal_skeleton(dag, uncovered=uncovered, **common) if goal_first
                    else sample_skeleton(dag, linked=linked, **common))  # fmt: skip
        key = (skeleton.graph_index, skeleton.stages)
        new_tools = skeleton_tools(skeleton) - covered
        single = len(skeleton.stages) == 1 and edges[index] > 0
        if key in seen or not skeleton.stages or single:
            stale += 1
            continue
        seen.add(key)
        skeletons.append(skeleton)
        covered |= new_tools
        stale = 0 if new_tools or len(skeletons) <= min_skeletons else stale + 1
    return CoverageResult(
        env_id=env_id,
        skeletons=tuple(skeletons),
        covered=tuple(sorted(covered)),
        total=len(nodes),
        coverage=len(covered) / len(nodes) if nodes else 1.0,
    )


def random_walk_skeleton(
    g: nx.DiGraph,
    *,
    max_len: int = 6,
    seed: int = 0,
    env_id: str | None = None,
    graph_index: int | None = None,
) -> Skeleton:
    """Baseline: a random walk (uniform start node, uniform successor), one tool per stage, no revisits.

    It ignores in-degrees, so a tool may appear before its other predecessors ran.
    """
    rng = random.Random(seed)
    nodes = sorted(g.nodes)
    walk: list[str] = []
    current = rng.choice(nodes) if nodes else None
    while current is not None and len(walk) < max_len:
        walk.append(current)
        options = sorted(set(g.successors(current)) - set(walk))
        current = rng.choice(options) if options else None
    return Skeleton(
        env_id=env_id if env_id is not None else str(g.graph.get("env_id", "")),
        graph_index=graph_index if graph_index is not None else int(g.graph.get("graph_index", 0)),
        stages=tuple((tool,) for tool in walk),
        seed=seed,
    )
