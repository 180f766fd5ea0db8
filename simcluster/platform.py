"""Platforms: the machine the ranks run on, with links that concurrent messages share.

A ``Platform`` is a latency model (``run(latency=platform)``) that knows the
machine's shape: ``nodes`` nodes of ``ranks_per_node`` ranks, the ranks of a
node joined by an intra-node fabric (shared memory, NVLink through an
NVSwitch), and the nodes' NICs (``nics_per_node``; rank ``r`` uses NIC
``r % nics_per_node`` of its node) joined by a ``network``: a ``Switch``, a
two-level ``FatTree`` or a three-level ``KAryFatTree``, each with any
oversubscription, a ``Torus`` or a ``Dragonfly``. Every link
is one direction of a full-duplex cable, with its own latency and
bandwidth.

A message is a flow along its route (``Platform.route``). With ``sharing``
(the default), the flows on a link share its bandwidth max-min fairly, and
are re-shared whenever a flow starts or ends (``engine.flows``): a flow first
waits its route's latency, then moves its bytes at its share. Without
sharing, a message costs its route's latency plus its size over the
route's narrowest link, whatever else is in flight. Routes are
deterministic: within a node, up the sender's link and down the receiver's;
across nodes, through the network, choosing among equal paths (a fat tree's
spines) by a stable hash of the pair (``zlib.crc32``, never Python's salted
``hash``), so times never depend on the seed or the run.

How flows share a link is a ``SharingModel`` record: ``latency_factor`` and
``bandwidth_factor`` scale every route's latency and every link's bandwidth,
``weighting="latency"`` gives each flow a part of a link inversely
proportional to its route's latency (plus ``weight_s`` bytes over each link's
bandwidth), ``tcp_window`` bounds each flow by a window per round trip, and
``crosstraffic`` charges a flow's acknowledgements to the links of the
reverse route. ``MAX_MIN`` (the default) is plain max-min fairness; ``CM02``
and ``LV08`` are SimGrid's network models of those names
(tests/test_platforms_simgrid.py checks every flow's time against SimGrid).

Presets (``dgx_h100``, ``ethernet_cluster``, ``laptop``) give the numbers of
common machines; docs/platforms.md gives the source of each.
"""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
import random
import zlib
from dataclasses import dataclass
from dataclasses import dataclass
from typing import Final

from . import latency as _latency
from .latency import LatencyModel, Ports

__all__ = ["CM02", "LV08", "MAX_MIN", "PRESETS", "Dragonfly", "FatTree", "KAryFatTree", "Link", "Platform", "SharingModel",
           "Switch", "Torus", "dgx_h100", "ethernet_cluster", "laptop", "parse"]


def __dir__() -> list[str]:
    return sorted(__all__)  # __all__ alone does not filter dir()


@dataclass(frozen=True)
class Link:
    """One direction of a cable: ``latency`` in seconds, ``bandwidth`` in bytes per second."""

    latency: float
    bandwidth: float

    def __post_init__(self) -> None:
        for name in ("latency", "bandwidth"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise TypeError(f"Link({name}={value!r}): {name} must be a finite number")
        if self.latency < 0:
            raise ValueError(f"Link(latency={self.latency!r}): latency must be >= 0 seconds")
        if self.bandwidth <= 0:
            raise ValueError(f"Link(bandwidth={self.bandwidth!r}): bandwidth must be > 0 bytes per "
                             "second (e.g. 12.5e9 for 100 Gb/s)")


class _Links:
    """The platform's link table, as it is built: each link's latency, bandwidth and name."""

    def __init__(self) -> None:
        self.latency: list[float] = []
        self.bandwidth: list[float] = []
        self.names: list[str] = []

    def add(self, link: Link, name: str) -> int:
        self.latency.append(float(link.latency))
        self.bandwidth.append(float(link.bandwidth))
        self.names.append(name)
        return len(self.names) - 1

    def duplex(self, link: Link, name: str) -> tuple[int, int]:
        """Both directions of a cable: (up, down)."""
        return self.add(link, f"{name} up"), self.add(link, f"{name} down")


class Network(ABC):
    """How the NICs of the nodes are joined: ``hosts`` endpoints, and a route between any two.

    Subclasses keep each NIC's cable in ``up`` and ``down`` (``nics``), add
    their own links in ``build`` and route in ``route``.
    """

    up: list[int]
    down: list[int]

    @abstractmethod
    def hosts(self) -> int:
        """How many NICs this network joins (0: as many as the platform has)."""

    @abstractmethod
    def build(self, links: _Links, hosts: int) -> None:
        """Add this network's links for ``hosts`` endpoints to ``links``."""

    @abstractmethod
    def route(self, a: int, b: int) -> list[int]:
        """The links from endpoint ``a`` to endpoint ``b`` (a != b), in order."""

    @abstractmethod
    def describe(self) -> str:
        """The network as its constructor call."""

    def nics(self, links: _Links, link: Link, count: int) -> None:
        """Add the cables of ``count`` NICs (``up``, ``down``): the first links of every network."""
        self.up, self.down = [], []
        for h in range(count):
            up, down = links.duplex(link, f"nic {h}")
            self.up.append(up)
            self.down.append(down)


class Switch(Network):
    """Every NIC on one non-blocking switch: a route is the sender's cable up, the receiver's down."""

    def __init__(self, link: Link) -> None:
        self.link = link

    def hosts(self) -> int:
        return 0  # any number

    def build(self, links: _Links, hosts: int) -> None:
        self.nics(links, self.link, hosts)

    def route(self, a: int, b: int) -> list[int]:
        return [self.up[a], self.down[b]]

    def describe(self) -> str:
        return f"Switch({self.link!r})"


def _check_oversubscription(network: str, ratio: object) -> None:
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio < math.inf:
        raise ValueError(f"{network}(oversubscription={ratio!r}): must be a number > 0 (2 for 2:1)")


class FatTree(Network):
    """A two-level fat tree (leaf and spine): ``hosts_per_leaf`` NICs per leaf switch, ``spines``
    spine switches, one cable from every leaf to every spine.

    ``uplink`` is a leaf-to-spine cable; by default it is chosen so the tree
    is ``oversubscription``:1 (1: non-blocking), i.e. each leaf's uplinks
    carry ``hosts_per_leaf * link.bandwidth / oversubscription`` in all.
    A route between two leaves goes up to one spine and down, the spine
    chosen by a stable hash of the pair (ECMP).
    """

    def __init__(self, hosts_per_leaf: int, spines: int, link: Link, uplink: Link | None = None,
                 oversubscription: float = 1.0) -> None:
        for name, value in (("hosts_per_leaf", hosts_per_leaf), ("spines", spines)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"FatTree({name}={value!r}): {name} must be an int >= 1")
        _check_oversubscription("FatTree", oversubscription)
        self.hosts_per_leaf = hosts_per_leaf
        self.spines = spines
        self.link = link
        self.oversubscription = float(oversubscription)
        self.uplink = uplink if uplink is not None else Link(
            link.latency, hosts_per_leaf * link.bandwidth / (spines * self.oversubscription))
        self.to_spine: list[list[int]] = []  # [leaf][spine]
        self.from_spine: list[list[int]] = []

    def hosts(self) -> int:
        return 0

    def build(self, links: _Links, hosts: int) -> None:
        self.to_spine, self.from_spine = [], []
        self.nics(links, self.link, hosts)
        for leaf in range(-(-hosts // self.hosts_per_leaf)):
            pairs = [links.duplex(self.uplink, f"leaf {leaf}-spine {s}") for s in range(self.spines)]
            self.to_spine.append([p[0] for p in pairs])
            self.from_spine.append([p[1] for p in pairs])

    def route(self, a: int, b: int) -> list[int]:
        la, lb = a // self.hosts_per_leaf, b // self.hosts_per_leaf
        if la == lb:
            return [self.up[a], self.down[b]]
        spine = zlib.crc32(f"{a}>{b}".encode()) % self.spines
        return [self.up[a], self.to_spine[la][spine], self.from_spine[lb][spine], self.down[b]]

    def describe(self) -> str:
        return (f"FatTree(hosts_per_leaf={self.hosts_per_leaf}, spines={self.spines}, link={self.link!r}, "
                f"uplink={self.uplink!r})")


class KAryFatTree(Network):
    """A three-level k-ary fat tree (k pods of k/2 edge and k/2 aggregation switches, (k/2)^2 core
    switches; k^3/4 NICs, k/2 on each edge switch), ``oversubscription``:1 above the edge.

    Each edge switch is cabled to every aggregation switch of its pod, and
    aggregation switch ``j`` of every pod to cores ``j*k/2`` to
    ``j*k/2 + k/2 - 1``. A route climbs only as high as it must; where
    several are equally short, a stable hash of the pair picks the
    aggregation switch and the core (ECMP).
    """

    def __init__(self, k: int, link: Link, oversubscription: float = 1.0) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 2 or k % 2:
            raise ValueError(f"KAryFatTree(k={k!r}): k must be an even int >= 2")
        _check_oversubscription("KAryFatTree", oversubscription)
        self.k = k
        self.link = link
        self.oversubscription = float(oversubscription)
        self.uplink = Link(link.latency, link.bandwidth / self.oversubscription)
        self.to_agg: dict[tuple[int, int], int] = {}  # (edge, aggregation index in its pod) -> link
        self.from_agg: dict[tuple[int, int], int] = {}  # (edge, aggregation index) -> link
        self.to_core: dict[tuple[int, int, int], int] = {}  # (pod, aggregation index, core) -> link
        self.from_core: dict[tuple[int, int, int], int] = {}

    def hosts(self) -> int:
        return self.k ** 3 // 4

    def build(self, links: _Links, hosts: int) -> None:
        half = self.k // 2
        self.to_agg, self.from_agg, self.to_core, self.from_core = {}, {}, {}, {}
        self.nics(links, self.link, self.hosts())
        for edge in range(self.k * half):
            for j in range(half):
                up, down = links.duplex(self.uplink, f"edge {edge}-agg {edge // half}.{j}")
                self.to_agg[(edge, j)] = up
                self.from_agg[(edge, j)] = down
        for pod in range(self.k):
            for j in range(half):
                for core in range(j * half, (j + 1) * half):
                    up, down = links.duplex(self.uplink, f"agg {pod}.{j}-core {core}")
                    self.to_core[(pod, j, core)] = up
                    self.from_core[(pod, j, core)] = down

    def route(self, a: int, b: int) -> list[int]:
        half = self.k // 2
        ea, eb = a // half, b // half
        if ea == eb:
            return [self.up[a], self.down[b]]
        spread = zlib.crc32(f"{a}>{b}".encode())
        j = spread % half
        if ea // half == eb // half:  # the same pod
            return [self.up[a], self.to_agg[(ea, j)], self.from_agg[(eb, j)], self.down[b]]
        core = j * half + (spread // half) % half
        return [self.up[a], self.to_agg[(ea, j)], self.to_core[(ea // half, j, core)],
                self.from_core[(eb // half, j, core)], self.from_agg[(eb, j)], self.down[b]]

    def describe(self) -> str:
        return f"KAryFatTree(k={self.k}, link={self.link!r}, oversubscription={self.oversubscription!r})"


class Torus(Network):
    """A torus of ``dims`` routers (2-D: ``(x, y)``, 3-D: ``(x, y, z)``), one NIC on each, each
    router cabled to its two neighbours in every dimension.

    Routes are dimension-ordered (all of x first, then y, then z), each
    dimension the shorter way round (forwards on a tie).
    """

    def __init__(self, dims: tuple[int, ...], link: Link, host_link: Link | None = None) -> None:
        if not isinstance(dims, tuple) or not dims or any(
                isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
            raise ValueError(f"Torus(dims={dims!r}): dims must be a tuple of ints >= 1, e.g. (4, 4)")
        self.dims = dims
        self.link = link
        self.host_link = host_link if host_link is not None else link
        self.hop: dict[tuple[int, int, int], int] = {}  # (router, dimension, +1/-1) -> link

    def hosts(self) -> int:
        return math.prod(self.dims)

    def _coords(self, r: int) -> list[int]:
        out = []
        for d in self.dims:
            out.append(r % d)
            r //= d
        return out

    def _index(self, coords: list[int]) -> int:
        r, scale = 0, 1
        for c, d in zip(coords, self.dims):
            r += c * scale
            scale *= d
        return r

    def build(self, links: _Links, hosts: int) -> None:
        self.hop = {}
        self.nics(links, self.host_link, self.hosts())
        for r in range(self.hosts()):
            for dim, size in enumerate(self.dims):
                for step in ((1, -1) if size > 2 else (1,) if size == 2 else ()):
                    self.hop[(r, dim, step)] = links.add(self.link, f"router {r} dim {dim} {step:+d}")

    def route(self, a: int, b: int) -> list[int]:
        path = [self.up[a]]
        here, there = self._coords(a), self._coords(b)
        for dim, size in enumerate(self.dims):
            forwards = (there[dim] - here[dim]) % size
            step = 1 if forwards <= size - forwards else -1
            for _ in range(forwards if step == 1 else size - forwards):
                key = (self._index(here), dim, step if size > 2 else 1)
                path.append(self.hop[key])
                here[dim] = (here[dim] + step) % size
        path.append(self.down[b])
        return path

    def describe(self) -> str:
        return f"Torus(dims={self.dims!r}, link={self.link!r}, host_link={self.host_link!r})"


class Dragonfly(Network):
    """A dragonfly: ``groups`` groups of ``routers`` routers, ``hosts_per_router`` NICs on each.

    The routers of a group are cabled all to all (``local``); every two
    groups by one global cable (``global_link``), which leaves group ``g``
    for group ``h`` from router ``h % routers`` and enters ``h`` at router
    ``g % routers``. Routes are minimal: to the router with the global
    cable, across it, then to the receiver's router.
    """

    def __init__(self, groups: int, routers: int, hosts_per_router: int, link: Link,
                 local: Link | None = None, global_link: Link | None = None) -> None:
        for name, value in (("groups", groups), ("routers", routers), ("hosts_per_router", hosts_per_router)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Dragonfly({name}={value!r}): {name} must be an int >= 1")
        self.groups = groups
        self.routers = routers
        self.hosts_per_router = hosts_per_router
        self.link = link
        self.local = local if local is not None else link
        self.global_link = global_link if global_link is not None else link
        self.within: dict[tuple[int, int, int], int] = {}  # (group, from router, to router) -> link
        self.between: dict[tuple[int, int], int] = {}  # (from group, to group) -> link

    def hosts(self) -> int:
        return self.groups * self.routers * self.hosts_per_router

    def build(self, links: _Links, hosts: int) -> None:
        self.within, self.between = {}, {}
        self.nics(links, self.link, self.hosts())
        for g in range(self.groups):
            for a in range(self.routers):
                for b in range(self.routers):
                    if a != b:
                        self.within[(g, a, b)] = links.add(self.local, f"group {g} router {a}-{b}")
            for h in range(self.groups):
                if h != g:
                    self.between[(g, h)] = links.add(self.global_link, f"group {g}-{h}")

    def route(self, a: int, b: int) -> list[int]:
        ga, ra = divmod(a // self.hosts_per_router, self.routers)
        gb, rb = divmod(b // self.hosts_per_router, self.routers)
        path = [self.up[a]]
        if ga == gb:
            if ra != rb:
                path.append(self.within[(ga, ra, rb)])
        else:
            leave, enter = gb % self.routers, ga % self.routers
            if ra != leave:
                path.append(self.within[(ga, ra, leave)])
            path.append(self.between[(ga, gb)])
            if enter != rb:
                path.append(self.within[(gb, enter, rb)])
        path.append(self.down[b])
        return path

    def describe(self) -> str:
        return (f"Dragonfly(groups={self.groups}, routers={self.routers}, hosts_per_router="
                f"{self.hosts_per_router}, link={self.link!r}, local={self.local!r}, "
                f"global_link={self.global_link!r})")


class Platform(LatencyModel):
    """The machine the ranks run on (see the module docstring); a latency model.

    Args:
        nodes: number of nodes.
        ranks_per_node: ranks on each node (GPUs, or cores); rank ``r`` is on
            node ``r // ranks_per_node``. The world may be smaller than
            ``nodes * ranks_per_node``, never larger.
        intra: each rank's link into its node's fabric (each direction):
            shared memory, or NVLink to an NVSwitch.
        network: how the NICs are joined (``Switch``, ``FatTree``, ``KAryFatTree``, ``Torus``,
            ``Dragonfly``).
        nics_per_node: NICs per node; rank ``r`` uses NIC ``r % nics_per_node``
            of its node.
        sharing: flows on a link share its bandwidth (on several hosting processes, every
            link's latency must be > 0);
            False: each message on its own.
        sharing_model: how they share it, a ``SharingModel``: ``MAX_MIN`` (the
            default), SimGrid's ``CM02`` or ``LV08``, or one of your own.
        network_efficiency: the part of each network link's bandwidth (the
            NICs' cables and the links between switches) that payload gets,
            in (0, 1]: what protocols cost beyond the line rate (``dgx_h100``:
            NCCL's, docs/platforms.md). 1: the line rate.
        gpus: the ranks are GPUs: the torch backend runs what NCCL would
            (all_reduce's ``nccl_ring`` or ``nccl_tree``, whichever NCCL's way
            of choosing picks; all_gather's and reduce_scatter's ``nccl_ring``;
            docs/platforms.md).
        name: what ``describe`` calls it.
    """

    def __init__(self, nodes: int, ranks_per_node: int, intra: Link, network: Network, *,
                 nics_per_node: int = 1, sharing: bool = True, sharing_model: SharingModel | None = None,
                 network_efficiency: float = 1.0, gpus: bool = False, name: str = "") -> None:
        for field, value in (("nodes", nodes), ("ranks_per_node", ranks_per_node),
                             ("nics_per_node", nics_per_node)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Platform({field}={value!r}): {field} must be an int >= 1")
        if not isinstance(intra, Link):
            raise TypeError(f"Platform(intra={intra!r}): expected a Link(latency, bandwidth)")
        if not isinstance(network, Network):
            raise TypeError(f"Platform(network={network!r}): expected a Switch, FatTree, KAryFatTree, Torus "
                            "or Dragonfly")
        model = MAX_MIN if sharing_model is None else sharing_model
        if not isinstance(model, SharingModel):
            raise TypeError(f"Platform(sharing_model={sharing_model!r}): expected a SharingModel, such as "
                            "simcluster.platform.MAX_MIN, CM02 or LV08")
        if isinstance(network_efficiency, bool) or not isinstance(network_efficiency, (int, float)) \
                or not 0 < network_efficiency <= 1:
            raise ValueError(f"Platform(network_efficiency={network_efficiency!r}): the part of the line rate "
                             "payload gets, a number in (0, 1], e.g. 0.96")
        hosts = nodes * nics_per_node
        fixed = network.hosts()
        if fixed and fixed < hosts:
            raise ValueError(f"Platform(network={network.describe()}): it joins {fixed} NICs, but "
                             f"{nodes} nodes x {nics_per_node} NICs need {hosts}; use a larger network")
        self.nodes = nodes
        self.ranks_per_node = ranks_per_node
        self.nics_per_node = nics_per_node
        self.intra = intra
        self.network = network
        self.sharing = bool(sharing)
        self.sharing_model = model
        self.network_efficiency = float(network_efficiency)
        self.gpus = bool(gpus)
        self.name = name
        links = _Links()
        self._rank_up: list[int] = []
        self._rank_down: list[int] = []
        for r in range(nodes * ranks_per_node):
            up, down = links.duplex(intra, f"rank {r} (node {r // ranks_per_node})")
            self._rank_up.append(up)
            self._rank_down.append(down)
        network = self.network = copy.copy(network)  # built for this platform: one may serve several
        network.build(links, hosts)
        self.links: Final = links
        first = 2 * nodes * ranks_per_node  # the ranks' own links come first, then the network's
        self.capacity = [bw * model.bandwidth_factor * (self.network_efficiency if i >= first else 1.0)
                         for i, bw in enumerate(links.bandwidth)]
        self._routes: dict[tuple[int, int], tuple[tuple[int, ...], float, float]] = {}

    # ---- routes ----

    def node_of(self, rank: int) -> int:
        """The node rank ``rank`` lives on (collectives that know the shape group ranks by it)."""
        return rank // self.ranks_per_node

    def placement(self) -> _latency.Placement:
        """The platform's nodes, NICs per node and GPUs; it routes every message (``routed``)."""
        return _latency.Placement(self.ranks_per_node, self.nodes, self.nics_per_node, self.gpus, routed=True)

    def nic(self, rank: int) -> int:
        """The network endpoint (NIC) rank ``rank`` sends and receives through."""
        node, local = divmod(rank, self.ranks_per_node)
        return node * self.nics_per_node + local % self.nics_per_node

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        """The links a message from rank ``src`` to rank ``dst`` crosses, in order (indices into
        ``links``; ``link_name`` names them)."""
        return self.path(src, dst)[0]

    def path(self, src: int, dst: int) -> tuple[tuple[int, ...], float, float]:
        """(``route``, its latency, the bandwidth of its narrowest link), made on first use."""
        key = (src, dst)
        known = self._routes.get(key)
        if known is not None:
            return known
        size = self.nodes * self.ranks_per_node
        if not (0 <= src < size and 0 <= dst < size):
            raise ValueError(f"{self.describe()}: ranks {src} and {dst}: the platform has ranks "
                             f"0 to {size - 1} ({self.nodes} nodes x {self.ranks_per_node}); give it "
                             "more nodes")
        if src // self.ranks_per_node == dst // self.ranks_per_node:
            path = [self._rank_up[src], self._rank_down[dst]]
        else:
            a, b = self.nic(src), self.nic(dst)
            path = [self._rank_up[src], *self.network.route(a, b), self._rank_down[dst]] if a != b else \
                [self._rank_up[src], self._rank_down[dst]]
        links = self.links
        latency = sum(links.latency[i] for i in path) * self.sharing_model.latency_factor
        found = (tuple(path), latency, min(self.capacity[i] for i in path))
        self._routes[key] = found
        return found

    def flow_terms(self, src: int, dst: int) -> tuple[float, float]:
        """(weight, bound) of a flow from ``src`` to ``dst``: its part of a link against its other
        flows' weights, and the most it may move per second (``inf``: no bound)."""
        route = self.path(src, dst)[0]
        latency = sum(self.links.latency[i] for i in route)  # the links' own: before latency_factor
        model = self.sharing_model
        weight = 1.0
        if model.weighting == "latency":
            penalty = latency + sum(model.weight_s / self.links.bandwidth[i] for i in route)
            weight = 1.0 / penalty if penalty > 0 else 1.0
        bound = math.inf
        if model.tcp_window and latency > 0:
            bound = model.bandwidth_factor * model.tcp_window / (2 * latency)
        return weight, bound

    def flow_latency(self, src: int, dst: int) -> float:
        """The latency a message from ``src`` to ``dst`` waits before its bytes move."""
        return self.path(src, dst)[1]

    def link_name(self, link: int) -> str:
        """What a link is: ``"rank 3 (node 0) up"``, ``"leaf 0-spine 1 down"``, ..."""
        return self.links.names[link]

    # ---- the latency model ----

    def check_world(self, world_size: int) -> None:
        """Raise ``ValueError`` if the platform has fewer than ``world_size`` ranks."""
        size = self.nodes * self.ranks_per_node
        if world_size > size:
            raise ValueError(f"{world_size} ranks do not fit on {size} ({self.nodes} nodes x "
                             f"{self.ranks_per_node} ranks per node)")

    def bind(self, world_size: int, rng: random.Random) -> Ports:
        """Ports that charge each message its route, alone (the engine shares flows itself)."""
        self.check_world(world_size)
        return _PlatformPorts(self)

    def lookahead(self) -> float:
        """The least latency of any route: two of the smallest link latencies (every route crosses
        at least the sender's link up and the receiver's down)."""
        return 2 * min(self.links.latency) * self.sharing_model.latency_factor

    def describe(self) -> str:
        if self.name:
            return self.name
        return (f"Platform(nodes={self.nodes}, ranks_per_node={self.ranks_per_node}, intra={self.intra!r}, "
                f"network={self.network.describe()}, nics_per_node={self.nics_per_node}"
                f"{'' if self.network_efficiency == 1 else f', network_efficiency={self.network_efficiency:g}'}"
                f"{'' if self.sharing_model == MAX_MIN else f', sharing_model={self.sharing_model!r}'}"
                f"{'' if self.sharing else ', sharing=False'})")


class _PlatformPorts(Ports):
    """Each message on its own: its route's latency plus its size over the narrowest link.

    ``platform`` tells the engine to share flows instead (``engine.flows``).
    """

    zero = False
    ordered = True

    def __init__(self, platform: Platform) -> None:
        self.platform = platform if platform.sharing else None
        self.check_world = platform.check_world
        self.path = platform.path
        self.terms = platform.flow_terms
        self.slowest: dict[tuple[int, int], float] = {}

    def transfer(self, src: int, dst: int, nbytes: int, t: float) -> tuple[float, float]:
        _, latency, capacity = self.path(src, dst)
        rate = self.slowest.get((src, dst))
        if rate is None:
            rate = self.slowest[(src, dst)] = min(capacity, self.terms(src, dst)[1])
        return t, t + latency + nbytes / rate

    def grow(self, world_size: int) -> None:
        """Spawned ranks take the next places of the platform; refused past its last."""
        self.check_world(world_size)


# ---- how flows share a link ----

def _number(value: object, least: float, what: str, field: str, *, strict: bool = False) -> float:
    """``value`` as a float at least ``least`` (above it when ``strict``), finite; else ValueError."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and value < math.inf and (
        value > least if strict else value >= least)
    if not ok:
        raise ValueError(f"SharingModel({field}={value!r}): {what}")
    return float(value)  # type: ignore[arg-type]


@dataclass(frozen=True)
class SharingModel:
    """How the flows that cross one link share its bandwidth (``Platform(sharing_model=...)``).

    Fields:
        weighting: ``"equal"`` (max-min fair) or ``"latency"``: a flow's part
            of a link inversely proportional to its route's latency (TCP's
            round-trip unfairness, SimGrid's CM02 model).
        weight_s: with ``weighting="latency"``, bytes: a flow's part of a link
            is inversely proportional to its route's latency plus
            ``weight_s`` over the bandwidth of each link of its route (SimGrid's
            weight-S; 0: the latency alone).
        tcp_window: bytes; no flow moves more than this per round trip
            (``tcp_window / (2 * latency)`` per second, of the latency before
            ``latency_factor``; SimGrid's TCP-gamma). None: no bound.
        crosstraffic: a flow also takes this part of its rate on each link of
            the reverse route (its acknowledgements; SimGrid's cross traffic:
            0.05); 0: none.
        latency_factor, bandwidth_factor: scale every route's latency and
            every link's bandwidth.
        precision: flows that would end within this many seconds of the
            first to end at an instant end with it (0: each at its own time).

    Each field is checked when the record is made: a bad value is a ``ValueError`` naming it.
    """

    weighting: str = "equal"
    weight_s: float = 0.0
    tcp_window: float | None = None
    crosstraffic: float = 0.0
    latency_factor: float = 1.0
    bandwidth_factor: float = 1.0
    precision: float = 1e-9

    def __post_init__(self) -> None:
        if self.weighting not in ("equal", "latency"):
            raise ValueError(f"SharingModel(weighting={self.weighting!r}): 'equal' (max-min) or 'latency' "
                             "(each flow's part inversely proportional to its route's latency)")
        fields = {
            "weight_s": _number(self.weight_s, 0, "must be a number >= 0 (SimGrid's LV08: 20537)", "weight_s"),
            "crosstraffic": _number(self.crosstraffic, 0, "must be a number >= 0 (SimGrid's LV08: 0.05)",
                                    "crosstraffic"),
            "latency_factor": _number(self.latency_factor, 0, "must be a number > 0", "latency_factor",
                                      strict=True),
            "bandwidth_factor": _number(self.bandwidth_factor, 0, "must be a number > 0", "bandwidth_factor",
                                        strict=True),
            "precision": _number(self.precision, 0, "must be seconds >= 0, e.g. 1e-9", "precision"),
        }
        if fields["precision"] >= 1:
            raise ValueError(f"SharingModel(precision={self.precision!r}): must be seconds >= 0, e.g. 1e-9")
        if self.tcp_window is not None:
            fields["tcp_window"] = _number(self.tcp_window, 0, "bytes > 0 (SimGrid's default: 4194304), or "
                                           "None for no bound", "tcp_window", strict=True)
        for name, value in fields.items():
            object.__setattr__(self, name, value)


MAX_MIN: Final = SharingModel()
"""Max-min fairness: every flow on a link gets an equal part, bounded by its other links."""

CM02: Final = SharingModel(weighting="latency", tcp_window=4194304)
"""SimGrid's CM02 network model with its default TCP-gamma."""

LV08: Final = SharingModel(weighting="latency", tcp_window=4194304, latency_factor=13.01,
                           bandwidth_factor=0.97, weight_s=20537, crosstraffic=0.05)
"""SimGrid's LV08 network model (its default), cross traffic on."""


# ---- presets ----


_NDR_DATA_RATE: Final = 50e9
"""A 400 Gb/s (NDR) InfiniBand port, bytes/s each way: 4 lanes of 100G-PAM4, and 400 Gb/s is the
aggregate data rate, the line encoding already taken out (NVIDIA LinkX documentation, "Key
Technologies": "400Gb/s = 4x100G-PAM4"); NCCL reads the same 50 GB/s (src/graph/topo.cc: the
port's speed in Mb/s over 8000)."""

_IB_PAYLOAD: Final = 4096 / (4096 + 8 + 12 + 4 + 2)
"""The payload share of an InfiniBand packet at the 4096-byte MTU: each also carries a local route
header (8 bytes), a base transport header (12), an invariant CRC (4) and a variant CRC (2)
(InfiniBand Architecture Specification vol. 1, chapter 7): 99.4%, 49.7 GB/s of payload."""

_NCCL_PCIE_GEN5_X16: Final = 16 * 240 * 100e6 / 8
"""What NCCL's topology gives the PCIe Gen5 x16 link between a GPU and its NIC, bytes/s: 240 x 100
Mb/s per lane for "32.0 GT/s PCIe" (``kvDictPciGen``, src/graph/topo.cc), 16 lanes: 48 GB/s, as
its topology dumps print it (``PCI[48.0]`` beside the NIC's ``NET[50.0]``, NVIDIA/nccl issue
1189); also the fastest inter-node ring channel its search tries on Hopper (the first entry of
``sm90SpeedArrayInter``, src/graph/search.cc)."""

_NCCL_NETWORK_EFFICIENCY: Final = min(_NCCL_PCIE_GEN5_X16, _NDR_DATA_RATE * _IB_PAYLOAD) / _NDR_DATA_RATE
"""The part of a 400 Gb/s NIC's line rate NCCL moves at large sizes: the narrower of the GPU's PCIe
link as NCCL models it and the port's payload rate, 48 of 50 GB/s (96%; the packet headers do not
bind). NCCL's tuning model adds nothing for its Simple protocol, which it runs at large sizes
(src/graph/tuning.cc: a ring's bus bandwidth is its channels times their speed), and NCCL's
developers give 46-48 GB/s per NDR NIC (NVIDIA/nccl-tests issue 290) and 24 GB/s per 200 Gb/s
NIC (NVIDIA/nccl-tests issue 119). docs/predict.md compares it with published measurements."""


def dgx_h100(nodes: int = 1, *, oversubscription: float = 1.0, sharing: bool = True) -> Platform:
    """DGX H100-like nodes: 8 GPUs on NVSwitch, one 400 Gb/s NIC per GPU, in a fat tree; the
    network carries NCCL's 96% of its line rate (docs/platforms.md gives the sources)."""
    nvlink = Link(latency=1e-6, bandwidth=450e9)  # per direction: 900 GB/s per GPU in all
    nic = Link(latency=1e-6, bandwidth=50e9)  # 400 Gb/s
    return Platform(nodes, 8, nvlink, FatTree(32, 16, nic, oversubscription=oversubscription),
                    nics_per_node=8, sharing=sharing, network_efficiency=_NCCL_NETWORK_EFFICIENCY, gpus=True,
                    name=f"dgx_h100({nodes})")


def ethernet_cluster(nodes: int = 4, cores: int = 16, *, oversubscription: float = 1.0,
                     sharing: bool = True) -> Platform:
    """Commodity nodes of ``cores`` ranks, one 25 Gb/s Ethernet NIC each, 32 to a leaf switch."""
    memory = Link(latency=0.5e-6, bandwidth=10e9)
    ethernet = Link(latency=10e-6, bandwidth=3.125e9)  # 25 Gb/s
    return Platform(nodes, cores, memory, FatTree(32, 4, ethernet, oversubscription=oversubscription),
                    sharing=sharing, name=f"ethernet_cluster({nodes}, {cores})")


def laptop(cores: int = 8, *, sharing: bool = True) -> Platform:
    """One machine: ``cores`` ranks sharing memory."""
    memory = Link(latency=0.5e-6, bandwidth=10e9)
    return Platform(1, cores, memory, Switch(memory), sharing=sharing, name=f"laptop({cores})")


PRESETS: Final = {"dgx_h100": ("NODES", "dgx_h100:4"), "ethernet_cluster": ("NODES,CORES", "ethernet_cluster:4,16"),
                  "laptop": ("CORES", "laptop:8")}
"""The presets ``parse`` reads, with the counts each takes and an example."""


def parse(spec: str) -> LatencyModel:
    """Build a latency model from a command-line ``--latency`` spec: a platform preset, or a form of
    ``simcluster.latency.parse``.

    Presets: ``dgx_h100[:NODES]``, ``ethernet_cluster[:NODES[,CORES]]``,
    ``laptop[:CORES]``, each optionally ending in ``,unshared`` (a platform
    whose messages do not share links): ``dgx_h100:4``, ``dgx_h100:4,unshared``.

    Raises:
        ValueError: a preset with bad counts, or a spec neither form reads.
    """
    if not isinstance(spec, str):
        return _latency.parse(spec)
    head, _, rest = spec.strip().partition(":")
    name = head.strip().lower()
    if name not in PRESETS:
        try:
            return _latency.parse(spec)
        except ValueError as exc:
            forms = ", ".join(f"{n}[:{counts}]" for n, (counts, _) in PRESETS.items())
            raise ValueError(f"{exc}; or a platform preset: {forms}, each optionally ending in "
                             "',unshared' (docs/platforms.md)") from None
    counts, example = PRESETS[name]
    texts = [text.strip() for text in rest.split(",")] if rest.strip() else []
    sharing = not texts or texts[-1] != "unshared"
    if not sharing:
        texts.pop()
    most = counts.count(",") + 1
    if len(texts) > most or not all(text.isdigit() and int(text) > 0 for text in texts):
        raise ValueError(f"parse({spec!r}): {name} takes up to {most} counts ({counts}) as whole numbers "
                         f"> 0, then optionally 'unshared', got {rest.strip()!r}; write it like {example!r}")
    numbers = [int(text) for text in texts]
    if name == "dgx_h100":
        return dgx_h100(*numbers, sharing=sharing)
    if name == "ethernet_cluster":
        return ethernet_cluster(*numbers, sharing=sharing)
    return laptop(*numbers, sharing=sharing)
