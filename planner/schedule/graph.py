"""The plan's run as a graph of what happens before what.

Nodes are the host's steps and, for every submit step, one instance of its
submission: a start marker (the device begins it), its launches in issue
order, and a done marker (its semaphore is released). Edges:

  host order     each host step after the one before it
  issue          a submit step -> its instance's start
  semaphore      the done marker of every submit step in `after` -> start
  program order  start -> each launch that waits for none of its
                 submission; each launch the submission says a launch
                 waits for -> that launch; each launch nothing waits for
                 -> done
  wait           the done marker of the awaited submit step -> the wait step

Node ids are given in run order (the host's steps in turn, each submit step
followed by its instance), and every edge goes from a smaller id to a larger
one, so the ids are a topological order and the id doubles as the node's
time in the run. Each node lies on one chain, a path totally ordered by
order: chain 0 is the host; a device node continues the chain of its first
predecessor that still ends one (an instance the stream of the instance it
waits on by semaphore, a launch that of a launch it waits for), and starts
a new chain otherwise (launches side by side). Happens-before for any two
nodes then comes from one vector clock per chain, computed in a single pass
in id order (`HappensBefore`); networkx holds the structure and finds the
path a report prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import networkx as nx
import numpy as np

from planner.kernels.manifest import READ, WRITE
from planner.schedule.plan import HOST_READ, HOST_WRITE, SUBMIT, WAIT, Access, Plan

STEP, START, LAUNCH, DONE = "step", "start", "launch", "done"
HOST_CHAIN = 0

# Why one node follows another (the edge attribute `why`).
HOST_ORDER, ISSUE, SEMAPHORE, PROGRAM_ORDER, AWAIT = "host order", "issue", "semaphore", "program order", "wait"


@dataclass(frozen=True, slots=True)
class Node:
    kind: str        # step | start | launch | done
    step: int        # run position of the host step, or of the submit step whose instance this is
    launch: int      # launch index (launch nodes), else -1
    chain: int       # HOST_CHAIN, or the stream the instance runs on
    pos: int         # place on the chain


def host_access(step) -> Access:
    """The bytes a host write or read step touches, as an access."""
    return Access(step.what or step.kind, WRITE if step.kind == HOST_WRITE else READ,
                  step.window, step.start, step.stop)


class RunGraph:
    """The run of `plan` as a networkx DiGraph; node attributes carry the
    node's accesses (`accesses`), edges say why they order (`why`)."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.nodes: list[Node] = []
        self.instances: dict[int, tuple[int, int]] = {}   # submit step -> (start node, done node)
        self.step_node: dict[int, int] = {}               # run position -> its host node
        graph = nx.DiGraph()
        edges: list[tuple[int, int, str]] = []
        chains = _Chains(self.nodes)
        for position, step in enumerate(plan.run):
            here = self._add(graph, Node(STEP, position, -1, HOST_CHAIN, position),
                             (host_access(step),) if step.kind in (HOST_WRITE, HOST_READ) else ())
            self.step_node[position] = here
            if position:
                edges.append((self.step_node[position - 1], here, HOST_ORDER))
            if step.kind == WAIT:
                edges.append((self.instances[step.after[0]][1], here, AWAIT))
            if step.kind != SUBMIT:
                continue
            awaited = [self.instances[a][1] for a in step.after]
            chains.begin(awaited)

            def add(kind: str, preds: list[int], why: str, index: int = -1, accesses: tuple[Access, ...] = ()) -> int:
                chain, pos = chains.place(preds)
                node = self._add(graph, Node(kind, position, index, chain, pos), accesses)
                edges.extend((p, node, why) for p in preds)
                return node

            start = add(START, awaited, SEMAPHORE)
            edges.append((here, start, ISSUE))
            node_of: dict[int, int] = {}
            followed: set[int] = set()
            for index, after in plan.submissions[step.submission].waits():
                preds = [node_of[a] for a in after] or [start]
                node_of[index] = add(LAUNCH, preds, PROGRAM_ORDER, index, plan.launches[index].accesses)
                followed.update(preds)
            done = add(DONE, [n for n in node_of.values() if n not in followed] or [start], PROGRAM_ORDER)
            chains.end(done)
            self.instances[position] = (start, done)
        graph.add_edges_from((u, v, {"why": why}) for u, v, why in edges)
        # Ids are a topological order: the happens-before pass relies on it.
        assert all(u < v for u, v, _ in edges)
        self.graph = graph
        self.chains = chains.count

    def _add(self, graph: nx.DiGraph, node: Node, accesses: tuple[Access, ...]) -> int:
        n = len(self.nodes)
        self.nodes.append(node)
        graph.add_node(n, kind=node.kind, step=node.step, launch=node.launch, accesses=accesses)
        return n

    def __len__(self) -> int:
        return len(self.nodes)

    def accesses(self, n: int) -> tuple[Access, ...]:
        return self.graph.nodes[n]["accesses"]

    @cached_property
    def happens_before(self) -> "HappensBefore":
        return HappensBefore(self)

    def describe(self, n: int) -> str:
        node = self.nodes[n]
        if node.kind == LAUNCH:
            launch = self.plan.launches[node.launch]
            submission = self.plan.run[node.step].submission
            return (f"launch {launch.index} {launch.image} ({launch.phase}) in submission {submission} "
                    f"issued at run step {node.step}")
        if node.kind == START:
            return f"submission {self.plan.run[node.step].submission} starts (run step {node.step})"
        if node.kind == DONE:
            return f"submission {self.plan.run[node.step].submission} releases its semaphore (run step {node.step})"
        step = self.plan.run[node.step]
        if step.kind == SUBMIT:
            return f"host issues submission {step.submission} (run step {node.step})"
        if step.kind == WAIT:
            return f"host waits for run step {step.after[0]} (run step {node.step})"
        return (f"host {step.kind}s {step.window} [{step.start:#x}, {step.stop:#x})"
                + (f" ({step.what})" if step.what else "") + f" (run step {node.step})")

    def path(self, a: int, b: int) -> tuple[list[int], bool]:
        """The shortest path from a to b, and whether it is directed (a happens
        before b). Nodes not ordered either way get the shortest path through
        the schedule ignoring direction: how they relate without an order."""
        if nx.has_path(self.graph, a, b):
            return nx.shortest_path(self.graph, a, b), True
        return nx.shortest_path(self.graph.to_undirected(as_view=True), a, b), False


class _Chains:
    """Puts each device node on a chain whose last node happens before it:
    that of its first predecessor still ending one, else any chain whose
    last node it follows, else a new one. Reusing chains keeps their number
    to about the launches that run side by side, not all there ever were.

    Within an instance, what a node follows is known exactly (a bit set of
    the instance's nodes before it). Before its start, a chain's last node
    is known to happen before the start only for the chains an awaited done
    marker closed (every node of an instance happens before its done
    marker), if nothing has been added to them since."""

    def __init__(self, nodes: list[Node]):
        self.nodes = nodes
        self.tails: dict[int, int] = {}                 # device chain -> its last node
        self.closed: dict[int, dict[int, int]] = {}     # done marker -> {chain: its last node then}

    @property
    def count(self) -> int:
        return len(self.tails) + 1                      # and the host's

    def begin(self, awaited: list[int]) -> None:
        self.pool = {c: t for d in awaited for c, t in self.closed.get(d, {}).items() if self.tails[c] == t}
        self.base = len(self.nodes)                     # the start marker's id
        self.follows: list[int] = []                    # per node of the instance: its ancestors there

    def place(self, preds: list[int]) -> tuple[int, int]:
        follows = 0
        for p in preds:
            if p >= self.base:
                follows |= self.follows[p - self.base] | 1 << (p - self.base)
        self.follows.append(follows)
        chain = next((self.nodes[p].chain for p in preds
                      if self.nodes[p].chain != HOST_CHAIN and self.tails[self.nodes[p].chain] == p), None)
        if chain is None:
            chain = next((c for c in sorted(self.pool) if self._follows(follows, c)), None)
        if chain is None:
            chain = len(self.tails) + 1
        pos = self.nodes[self.tails[chain]].pos + 1 if chain in self.tails else 0
        self.tails[chain] = len(self.nodes)
        self.pool[chain] = -1                           # in use by this instance
        return chain, pos

    def _follows(self, follows: int, chain: int) -> bool:
        tail = self.tails[chain]
        if tail >= self.base:
            return bool(follows >> (tail - self.base) & 1)
        return self.pool[chain] == tail

    def end(self, done: int) -> None:
        self.closed[done] = {c: self.tails[c] for c in self.pool}


class HappensBefore:
    """Vector clocks over the chains, computed in one pass in topological order.

    `clock(v)[c]` is the largest position on chain c of a node that happens
    before v (-1: none). A node whose only predecessor is the one before it on
    its own chain learns nothing new, so it shares that predecessor's row;
    only joins (an instance's start, a host wait) make a new row. Memory is
    rows x chains: rows about the number of submit and wait steps, chains
    the streams that run at once (plus the host).
    """

    def __init__(self, run: RunGraph):
        nodes, pred = run.nodes, run.graph.pred
        self.chain = np.fromiter((n.chain for n in nodes), np.int64, len(nodes))
        self.pos = np.fromiter((n.pos for n in nodes), np.int64, len(nodes))
        self.row = np.empty(len(nodes), np.int64)
        rows: list[np.ndarray] = []
        empty = np.full(run.chains, -1, np.int64)
        for v, node in enumerate(nodes):
            preds = pred[v]
            if len(preds) == 1:
                (p,) = preds
                if nodes[p].chain == node.chain:
                    self.row[v] = self.row[p]
                    continue
            clock = empty.copy()
            for p in preds:
                np.maximum(clock, rows[self.row[p]], out=clock)
                c = nodes[p].chain
                clock[c] = max(clock[c], nodes[p].pos)
            self.row[v] = len(rows)
            rows.append(clock)
        self.clocks = np.vstack(rows) if rows else empty[None, :]

    def reading(self, a: int, b: int) -> int:
        """The largest position on a's chain that happens before b (-1: none)."""
        return int(self.clocks[self.row[b], self.chain[a]])

    def before(self, a: int, b: int) -> bool:
        """a happens before b."""
        if self.chain[a] == self.chain[b]:
            return bool(self.pos[a] < self.pos[b])
        return self.reading(a, b) >= self.pos[a]

    def ordered(self, a: int, b: int) -> bool:
        return self.before(a, b) or self.before(b, a)
