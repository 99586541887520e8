# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The Topology Manager: construction (NewManager), the hint merge and the admission decision, as HINTS.md
specifies (kubelet v1.33-v1.35 mainline).

NUMA affinities are bitmasks (int): bit n is NUMA node n, as the kubelet's bitmask package holds them, so "the
lowest bitmask value" and "narrower" compare exactly as the kubelet's do.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Set, Tuple

from ..errors import TopologyManagerError
from .hints import TopologyHint
from .options import parse_bool

NONE, BEST_EFFORT, RESTRICTED, SINGLE_NUMA_NODE = "none", "best-effort", "restricted", "single-numa-node"
POLICIES = (NONE, BEST_EFFORT, RESTRICTED, SINGLE_NUMA_NODE)
SCOPES = ("container", "pod")
PREFER_CLOSEST = "prefer-closest-numa-nodes"
MAX_ALLOWABLE = "max-allowable-numa-nodes"
DEFAULT_MAX_NUMA = 8
_GO_INT = re.compile(r"[+-]?[0-9]+")


class Merged(NamedTuple):
    affinity: Optional[int]  # bitmask; None: the nil mask (single-numa-node's "any", the none policy)
    preferred: bool
    admit: bool

    @property
    def nodes(self) -> Optional[List[int]]:
        return None if self.affinity is None else bits(self.affinity)

    def to_dict(self) -> Dict[str, Any]:
        return {"numa_affinity": self.nodes, "preferred": self.preferred, "admit": self.admit}


def mask_of(nodes: Iterable[int]) -> int:
    value = 0
    for node in nodes:
        value |= 1 << node
    return value


def bits(mask: int) -> List[int]:
    return [n for n in range(mask.bit_length()) if mask >> n & 1]


def _count(mask: int) -> int:
    return bin(mask).count("1")


def _narrower(a: int, b: int) -> bool:
    """bitmask.IsNarrowerThan: fewer nodes, then the lower value."""
    ca, cb = _count(a), _count(b)
    return a < b if ca == cb else ca < cb


def go_atoi(text: str) -> int:
    """strconv.Atoi (64-bit): raises ValueError with Go's text."""
    if not _GO_INT.fullmatch(text):
        raise ValueError('strconv.Atoi: parsing "%s": invalid syntax' % text)
    value = int(text)
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError('strconv.Atoi: parsing "%s": value out of range' % text)
    return value


class TopologyManagerOptions(NamedTuple):
    prefer_closest: bool = False
    max_numa: int = DEFAULT_MAX_NUMA


def parse_policy_options(raw: Optional[Mapping[str, str]]) -> TopologyManagerOptions:
    """NewPolicyOptions (no feature gates: both options are always available). With several bad entries the
    kubelet reports one at random (Go map order); this reports the first in sorted order."""
    prefer, max_numa = False, DEFAULT_MAX_NUMA
    for name in sorted(raw or {}):
        value = (raw or {})[name]
        if name == PREFER_CLOSEST:
            try:
                prefer = parse_bool(value)
            except ValueError as exc:
                raise TopologyManagerError('bad value for option "%s": %s' % (name, exc)) from None
        elif name == MAX_ALLOWABLE:
            try:
                max_numa = go_atoi(value)
            except ValueError as exc:
                raise TopologyManagerError('unable to convert policy option to integer "%s": %s'
                                           % (name, exc)) from None
            if max_numa < DEFAULT_MAX_NUMA:
                raise TopologyManagerError('the minimum value of "%s" should not be less than %d'
                                           % (MAX_ALLOWABLE, DEFAULT_MAX_NUMA))
        else:
            raise TopologyManagerError('unknown Topology Manager Policy option: "%s"' % name)
    return TopologyManagerOptions(prefer, max_numa)


class TopologyManager:
    """NewManager + the policy's Merge: built once per node, then ``merge`` per container (or pod)."""

    def __init__(self, policy: str, numa_nodes: Sequence[int], options: Optional[Mapping[str, str]] = None,
                 distances: Optional[Mapping[int, Sequence[int]]] = None) -> None:
        self.policy = policy
        self.nodes = sorted(set(numa_nodes))
        self.default = mask_of(self.nodes)
        self.options = TopologyManagerOptions()
        self.distances: Dict[int, Sequence[int]] = {}
        if policy == NONE:
            return
        self.options = parse_policy_options(options)
        if self.options.prefer_closest:
            for node in self.nodes:
                row = (distances or {}).get(node)
                if row is None or len(row) <= max(self.nodes):
                    raise TopologyManagerError("cannot discover NUMA topology: error getting NUMA distances from "
                                               "cadvisor")
                self.distances[node] = row
        if len(self.nodes) > self.options.max_numa:
            raise TopologyManagerError("unsupported on machines with more than %d NUMA Nodes" % self.options.max_numa)
        if policy not in POLICIES:
            raise TopologyManagerError('unknown policy: "%s"' % policy)

    # --- the merge ---------------------------------------------------------------------------------------------
    def _average_distance(self, mask: int) -> float:
        nodes = bits(mask)
        if not nodes:
            return 0.0
        return sum(self.distances[a][b] for a in nodes for b in nodes) / float(len(nodes) * len(nodes))

    def _better_mask(self, current: int, candidate: int) -> bool:
        """compareNumaAffinityMasks: does the candidate's mask win (Narrowest, or Closest with the option)?"""
        if candidate == current:
            return False
        if self.options.prefer_closest and self.policy != SINGLE_NUMA_NODE and _count(candidate) == _count(current):
            near, far = self._average_distance(candidate), self._average_distance(current)
            if near != far:
                return near < far
            return candidate < current
        return _narrower(candidate, current)

    def _compare(self, current: Optional[Candidate], candidate: Candidate, best_count: int) -> bool:
        """HintMerger.compare: does the candidate replace the current best?"""
        if candidate.mask == 0:
            return False
        if current is None:
            return True
        if current.preferred != candidate.preferred:
            return candidate.preferred
        if current.preferred:
            return self._better_mask(current.mask, candidate.mask)
        cur, cand = _count(current.mask), _count(candidate.mask)
        if cur > best_count:
            return self._better_mask(current.mask, candidate.mask)
        if cur == best_count:
            return cand == best_count and self._better_mask(current.mask, candidate.mask)
        if cand > best_count:
            return False
        if cand == best_count:
            return True
        if cand != cur:
            return cand > cur
        return self._better_mask(current.mask, candidate.mask)

    def merge(self, providers: Sequence[Optional[Mapping[str, Optional[Sequence[TopologyHint]]]]]) -> Merged:
        """Merge the providers' hints (a list of resource -> hints maps) and decide admission."""
        if self.policy == NONE:
            return Merged(None, False, True)
        lists = _filter_providers(providers)
        if self.policy == SINGLE_NUMA_NODE:
            lists = [[h for h in hints if h.preferred and (h.affinity is None or len(h.affinity) == 1)]
                     for hints in lists]
        best_count = 0
        for hints in lists:
            masks = [mask_of(h.affinity) for h in hints if h.affinity is not None]
            if masks:
                narrowest = masks[0]
                for mask in masks[1:]:
                    if _narrower(mask, narrowest):
                        narrowest = mask
                best_count = max(best_count, _count(narrowest))
        # The kubelet folds compare over every permutation in order; compare ranks candidates in a total preorder
        # whose ties are identical hints, so folding it over the distinct merged hints gives the same answer.
        best: Optional[Candidate] = None
        for candidate in sorted(_merged_candidates(lists, self.default)):
            if self._compare(best, candidate, best_count):
                best = candidate
        mask, preferred = (self.default, False) if best is None else best
        affinity: Optional[int] = mask
        if self.policy == SINGLE_NUMA_NODE and mask == self.default:
            affinity = None
        admit = self.policy == BEST_EFFORT or preferred
        return Merged(affinity, preferred, admit)


class Candidate(NamedTuple):
    mask: int
    preferred: bool


def _filter_providers(providers: Sequence[Optional[Mapping[str, Optional[Sequence[TopologyHint]]]]]
                      ) -> List[List[TopologyHint]]:
    """filterProvidersHints: nil or {} providers and nil lists are a preferred "any"; [] a non-preferred one."""
    lists: List[List[TopologyHint]] = []
    for provider in providers:
        if not provider:
            lists.append([TopologyHint(None, True)])
            continue
        for hints in provider.values():
            if hints is None:
                lists.append([TopologyHint(None, True)])
            elif not hints:
                lists.append([TopologyHint(None, False)])
            else:
                lists.append(list(hints))
    return lists


def _merged_candidates(lists: List[List[TopologyHint]], default: int) -> Iterable[Candidate]:
    """iterateAllProviderTopologyHints + mergePermutation, as the set of distinct results: every combination of one
    hint per resource, ANDed with the default affinity, preferred when all its hints are and all their non-nil
    affinities are equal. Partial combinations that end alike are merged as they go (a preferred one is known by
    its common affinity, a non-preferred one by its AND), which keeps 255 x 255 hints to a few thousand steps."""
    states: Set[Tuple[int, Optional[int], bool]] = {(default, None, True)}  # (AND, common affinity, preferred)
    for hints in lists:
        masks = {(None if h.affinity is None else mask_of(h.affinity), h.preferred) for h in hints}
        following: Set[Tuple[int, Optional[int], bool]] = set()
        for merged, first, preferred in states:
            for mask, hint_preferred in masks:
                if mask is None:
                    still = preferred and hint_preferred
                    following.add((merged, first if still else -1, still))
                else:
                    still = preferred and hint_preferred and (first is None or first == mask)
                    following.add((merged & mask, (mask if first is None else first) if still else -1, still))
        states = following
    return {Candidate(merged, preferred) for merged, _first, preferred in states}


def _hint(doc: Any, where: str) -> TopologyHint:
    if not isinstance(doc, dict) or set(doc) - {"numa_affinity", "preferred"} or "preferred" not in doc:
        raise TopologyManagerError('%s: a hint is {"numa_affinity": [nodes] | null, "preferred": bool}, got %r'
                                   % (where, doc))
    nodes, preferred = doc.get("numa_affinity"), doc["preferred"]
    if not isinstance(preferred, bool):
        raise TopologyManagerError("%s: preferred must be true or false, got %r" % (where, preferred))
    if nodes is None:
        return TopologyHint(None, preferred)
    valid = isinstance(nodes, list) and all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 64
                                            for n in nodes)
    if not valid:
        raise TopologyManagerError("%s: numa_affinity must be a list of NUMA node ids (0-63) or null, got %r"
                                   % (where, nodes))
    return TopologyHint(tuple(sorted(set(nodes))), preferred)


def parse_providers(doc: Any, where: str = "hints") -> List[Optional[Dict[str, Optional[List[TopologyHint]]]]]:
    """The providers' answers (Go []map[string][]TopologyHint) from JSON, every value checked; or what ``hints``
    prints (``{"hints": [...]}``), the CPU manager's answer alone."""
    if isinstance(doc, dict) and set(doc) == {"hints"}:
        doc = [{"cpu": doc["hints"]}]
    if not isinstance(doc, list):
        raise TopologyManagerError("%s: expected a JSON list with one element per hint provider, or what "
                                   "hints prints ({\"hints\": [...]})" % where)
    providers: List[Optional[Dict[str, Optional[List[TopologyHint]]]]] = []
    for index, provider in enumerate(doc):
        if provider is None:
            providers.append(None)
            continue
        if not isinstance(provider, dict):
            raise TopologyManagerError("%s: provider %d must be null or an object of resource -> hints"
                                       % (where, index))
        parsed: Dict[str, Optional[List[TopologyHint]]] = {}
        for resource, hints in provider.items():
            if hints is None:
                parsed[resource] = None
            elif isinstance(hints, list):
                parsed[resource] = [_hint(h, "%s: provider %d, %s" % (where, index, resource)) for h in hints]
            else:
                raise TopologyManagerError("%s: provider %d, %s: expected a list of hints or null"
                                           % (where, index, resource))
        providers.append(parsed)
    return providers
