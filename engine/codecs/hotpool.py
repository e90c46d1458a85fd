"""The FP4 hot-expert pool: which routed experts get a second, 4-bit copy.

Routing is skewed: a small share of the experts serves a large share of the routed tokens.
The pool holds NVFP4 copies of the experts with the most routed tokens per byte within a byte
budget (default 2 GiB); a token routed to a pooled expert is served at 4 bits instead of 2.
``coverage`` is the share of routed tokens that hit the pool.

Offline, :func:`select_pool` picks the pool from calibration routing counts. Online,
:class:`HotPoolSelector` keeps exponentially decayed live counts and swaps an expert in only
when it beats the weakest resident by a hysteresis margin, so noise does not cause churn.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.codecs.nvfp4 import matrix_fp4_bytes

__all__ = [
    "DEFAULT_BUDGET_BYTES",
    "GLM53_EXPERT_FP4_BYTES",
    "GiB",
    "HotPoolSelector",
    "PoolChange",
    "coverage",
    "expert_fp4_bytes",
    "select_pool",
]

GiB = 1 << 30
DEFAULT_BUDGET_BYTES = 2 * GiB

Expert = tuple[int, int]  # (layer, expert)


def expert_fp4_bytes(out_features: int, in_features: int) -> int:
    """NVFP4 bytes of one expert whose gate and up projections are ``[out, in]``.

    An expert is three matrices: gate ``[out, in]``, up ``[out, in]`` and down ``[in, out]``;
    for GLM-5.3-Flash ``out`` = moe_intermediate_size 2048 and ``in`` = hidden_size 4096.
    """
    return 2 * matrix_fp4_bytes(out_features, in_features) + matrix_fp4_bytes(
        in_features, out_features
    )


#: One GLM-5.3-Flash routed expert (intermediate 2048, hidden 4096) in NVFP4: 14,155,788 bytes.
GLM53_EXPERT_FP4_BYTES = expert_fp4_bytes(2048, 4096)


def _bytes_grid(expert_bytes: int | torch.Tensor, shape: torch.Size) -> torch.Tensor:
    if isinstance(expert_bytes, int):
        if expert_bytes <= 0:
            raise ValueError(f"expert size must be positive, got {expert_bytes}")
        return torch.full(shape, float(expert_bytes), dtype=torch.float64)
    b = expert_bytes.to(torch.float64).expand(shape)
    if bool((b <= 0).any()):
        raise ValueError("expert sizes must be positive")
    return b


def _check_counts(counts: torch.Tensor) -> torch.Tensor:
    if counts.dim() != 2:
        raise ValueError(f"counts must be [layers, experts], got shape {tuple(counts.shape)}")
    c = counts.to(torch.float64)
    if not bool(torch.isfinite(c).all()) or bool((c < 0).any()):
        raise ValueError("routing counts must be finite and non-negative")
    return c


def _greedy(
    score: torch.Tensor, size: torch.Tensor, budget: float, exclude: torch.Tensor | None = None
) -> list[Expert]:
    """Experts by descending score per byte that fit in ``budget`` (skipping ones that don't)."""
    density = (score / size).reshape(-1)
    order = torch.argsort(density, descending=True, stable=True)
    sizes = size.reshape(-1)
    n_exp = score.shape[1]
    chosen: list[Expert] = []
    left = budget
    min_size = float(sizes.min()) if sizes.numel() else 0.0
    for flat in order.tolist():
        if density[flat] <= 0 or left < min_size:
            break
        pos = (flat // n_exp, flat % n_exp)
        if exclude is not None and bool(exclude[pos]):
            continue
        s = float(sizes[flat])
        if s <= left:
            chosen.append(pos)
            left -= s
    return chosen


def select_pool(
    counts: torch.Tensor,
    expert_bytes: int | torch.Tensor,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
    exclude: set[Expert] | None = None,
) -> set[Expert]:
    """Pick ``(layer, expert)`` pairs with the most routed tokens per byte within the budget.

    ``counts`` is ``[layers, experts]`` routed-token counts; ``expert_bytes`` the FP4 size of one
    expert (an int, or a tensor broadcastable to ``counts``). Experts that were never routed to
    are not pooled, nor are those in ``exclude`` (e.g. the pool itself, when choosing the
    candidates that come next).
    """
    c = _check_counts(counts)
    mask = None
    if exclude:
        mask = torch.zeros(c.shape, dtype=torch.bool)
        for p in exclude:
            mask[p] = True
    return set(_greedy(c, _bytes_grid(expert_bytes, c.shape), float(budget_bytes), mask))


def coverage(selection: set[Expert] | frozenset[Expert], counts: torch.Tensor) -> float:
    """Share of routed tokens in ``counts`` that go to a pooled expert (0.0 if none routed)."""
    c = _check_counts(counts)
    total = float(c.sum())
    if total == 0:
        return 0.0
    hit = sum(float(c[layer, expert]) for layer, expert in selection)
    return hit / total


@dataclass(frozen=True)
class PoolChange:
    """Experts to load into (``add``) and drop from (``remove``) the pool."""

    add: frozenset[Expert] = field(default_factory=frozenset)
    remove: frozenset[Expert] = field(default_factory=frozenset)

    def __bool__(self) -> bool:
        return bool(self.add or self.remove)


class HotPoolSelector:
    """Re-chooses the pool from live routing counts, with hysteresis.

    ``observe`` decays the running scores by ``decay`` and adds the new counts, so old traffic
    fades with a half-life of ``log(0.5) / log(decay)`` observations. ``reselect`` fills free
    space with the best non-residents, then swaps the best candidate for the weakest residents
    only while the candidate's tokens per byte exceed theirs by the factor ``1 + hysteresis``;
    at most ``max_swaps`` swaps per call (filling free space is not limited).
    """

    def __init__(
        self,
        budget_bytes: int = DEFAULT_BUDGET_BYTES,
        expert_bytes: int | torch.Tensor = GLM53_EXPERT_FP4_BYTES,
        hysteresis: float = 0.1,
        decay: float = 0.9,
        max_swaps: int | None = None,
        initial: set[Expert] | None = None,
    ) -> None:
        if budget_bytes < 0:
            raise ValueError(f"pool budget must be non-negative, got {budget_bytes}")
        if hysteresis < 0:
            raise ValueError(f"hysteresis must be non-negative, got {hysteresis}")
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        self.budget_bytes = budget_bytes
        self.expert_bytes = expert_bytes
        self.hysteresis = hysteresis
        self.decay = decay
        self.max_swaps = max_swaps
        self._scores: torch.Tensor | None = None
        self._sizes: torch.Tensor | None = None
        self._resident: set[Expert] = set(initial or ())

    @property
    def resident(self) -> frozenset[Expert]:
        return frozenset(self._resident)

    @property
    def scores(self) -> torch.Tensor | None:
        """Decayed routed-token counts ``[layers, experts]`` (None before any observation)."""
        return self._scores

    @property
    def used_bytes(self) -> float:
        if self._sizes is None:
            return 0.0
        return sum(float(self._sizes[p]) for p in self._resident)

    @property
    def coverage(self) -> float:
        """Share of the decayed routed tokens that the current pool serves at 4 bits."""
        if self._scores is None:
            return 0.0
        return coverage(self._resident, self._scores)

    def observe(self, counts_delta: torch.Tensor) -> None:
        """Add the routed-token counts seen since the last call."""
        delta = _check_counts(counts_delta)
        if self._scores is None:
            self._scores = delta.clone()
            self._sizes = _bytes_grid(self.expert_bytes, delta.shape)
            return
        if delta.shape != self._scores.shape:
            raise ValueError(
                f"counts shape {tuple(delta.shape)} differs from {tuple(self._scores.shape)}"
            )
        self._scores.mul_(self.decay).add_(delta)

    def reselect(self) -> PoolChange:
        """Update the pool; returns what to load and what to drop."""
        if self._scores is None or self._sizes is None:
            return PoolChange()
        scores, sizes = self._scores, self._sizes
        density = scores / sizes
        resident_mask = torch.zeros(scores.shape, dtype=torch.bool)
        for p in self._resident:
            resident_mask[p] = True
        added: set[Expert] = set()
        removed: set[Expert] = set()
        free = self.budget_bytes - self.used_bytes
        # 1. Fill free space: no hysteresis needed, nothing is evicted.
        for p in _greedy(scores, sizes, free, exclude=resident_mask):
            added.add(p)
            resident_mask[p] = True
            free -= float(sizes[p])
        # 2. Swap: best candidates against weakest residents, both in density order.
        margin = 1.0 + self.hysteresis
        flat_density = density.reshape(-1)
        n_exp = scores.shape[1]
        cand = torch.argsort(
            torch.where(resident_mask.reshape(-1), -1.0, flat_density), descending=True
        ).tolist()
        weak = torch.argsort(
            torch.where(resident_mask.reshape(-1), flat_density, float("inf"))
        ).tolist()
        n_resident = int(resident_mask.sum())
        weak = weak[:n_resident]
        wi = 0
        swaps = 0
        for c_flat in cand:
            if self.max_swaps is not None and swaps >= self.max_swaps:
                break
            c_density = float(flat_density[c_flat])
            if c_density <= 0 or resident_mask.view(-1)[c_flat]:
                break
            c_size = float(sizes.view(-1)[c_flat])
            # Evict weakest residents until the candidate fits, all of them beaten by the margin.
            victims: list[int] = []
            room = free
            j = wi
            while room < c_size and j < len(weak):
                v = weak[j]
                if float(flat_density[v]) * margin >= c_density:
                    break
                victims.append(v)
                room += float(sizes.view(-1)[v])
                j += 1
            if room < c_size:
                break
            for v in victims:
                pos = (v // n_exp, v % n_exp)
                resident_mask[pos] = False
                if pos in added:
                    added.discard(pos)
                else:
                    removed.add(pos)
            wi = j
            free = room - c_size
            pos = (c_flat // n_exp, c_flat % n_exp)
            resident_mask[pos] = True
            added.add(pos)
            swaps += 1
        self._resident = (self._resident - removed) | added
        return PoolChange(frozenset(added), frozenset(removed))
