"""Columnar frames on numpy: the relational primitives of the set-at-a-time engine.

A :class:`Frame` is a bag of tuples held as one numpy array per named column: ``int64``,
``float64``, ``bool``, and strings as ``int64`` codes of a process-wide dictionary
(:data:`STRINGS`; equal strings, equal codes), so every key is a number and every primitive is
a handful of numpy calls. The primitives — take and filter rows, add a column, inner / anti /
cross join on named columns, distinct rows, concatenation, group minimum or maximum — are what
:mod:`.columnar` interprets the compiled rules with.

Why numpy and not a frame library: the engine runs a few thousand small operations per
evaluation (one step per rank of the schedule, each a handful of joins), so the fixed cost of
an operation decides. Measured here (``benchmarks/engine.py``'s floor section keeps the
numbers): Polars 2.1 takes 80–110 µs for a filter or a join of 10 rows, numpy's sort-based
join a few µs; on 35,000-pair queries Polars made the stratum slower than the tuple engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from reopt.costmodel.builtins import BOOLEAN, DOUBLE, LONG, STRING

NUMPY = {LONG: np.int64, DOUBLE: np.float64, BOOLEAN: np.bool_, STRING: np.int64}


class Strings:
    """The string dictionary: code ↔ string, append-only, shared by every frame of the
    process (codes compare equal exactly when the strings do)."""

    def __init__(self) -> None:
        self.code: dict[str, int] = {}
        self.text: list[str] = []
        self._array: np.ndarray = np.empty(0, dtype=object)

    def encode(self, values: Iterable[Any]) -> np.ndarray:
        code, text = self.code, self.text
        if isinstance(values, np.ndarray):
            few = self._few(values) if len(values) >= FEW_FROM else None
            if few is not None:
                return few
            values = values.tolist()
        values = values if isinstance(values, list) else list(values)
        try:  # every string known: one C-level pass
            return np.fromiter(map(code.__getitem__, values), np.int64, len(values))
        except KeyError:
            pass
        out = []
        for v in values:
            c = code.get(v)
            if c is None:
                c = code[v] = len(text)
                text.append(v)
            out.append(c)
        return np.asarray(out, dtype=np.int64)

    def _few(self, values: np.ndarray) -> np.ndarray | None:
        """The codes of an ``object`` array of at most :data:`FEW` distinct strings — a
        built-in's property or operator column, most often one value throughout — by one
        vectorized comparison per distinct string instead of a dictionary lookup per value;
        None when it holds more (or something not a string). New strings get their codes in
        the order they first occur, as :meth:`encode`'s loop gives them. An array of one
        value broadcast (stride 0: a model's column of ``any`` properties, 115,000 rows an
        optimization on large-clique-14) is that value's code throughout, not compared."""
        out = np.empty(len(values), dtype=np.int64)
        rest, at = values, None
        for _ in range(FEW):
            v = rest[0]
            if type(v) is not str:
                return None
            c = self.code.get(v)
            if c is None:
                c = self.code[v] = len(self.text)
                self.text.append(v)
            if at is None and values.strides == (0,):  # one value seen n times (broadcast)
                out[:] = c
                return out
            same = np.asarray(rest == v, dtype=bool)
            if at is None and same.all():
                out[:] = c
                return out
            out[same.nonzero()[0] if at is None else at[same]] = c
            other = ~same
            at = other.nonzero()[0] if at is None else at[other]
            rest = values[at]
            if not len(rest):
                return out
        return None

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """The strings of ``codes`` as an ``object`` array."""
        if len(self._array) != len(self.text):
            self._array = np.empty(len(self.text), dtype=object)
            self._array[:] = self.text
        return self._array[codes]

    def read(self, codes: np.ndarray) -> np.ndarray:
        """:meth:`decode` for a reader that never writes into the array (a built-in's
        input): where every code is the same, that string broadcast (a read-only view,
        stride 0) instead of a reference per row — a model's property and operator columns,
        ``any`` and ``join`` throughout under ``cout``: five of ``Fn_nonscancost``'s
        inputs, 35,000 rows an optimization on large-clique-17."""
        n = len(codes)
        if n >= FEW_FROM and (codes.strides == (0,) or _one_value(codes)):
            return np.broadcast_to(self.decode(codes[:1]), (n,))
        return self.decode(codes)


def _one_value(codes: np.ndarray) -> bool:
    """Whether every code is the first: its ends compared first, as a column of many values
    most often differs there (then no pass over it: under ``io`` the property and operator
    columns hold several)."""
    first = codes[0]
    return bool(first == codes[-1] and codes.min() == first == codes.max())


FEW = 3
"""Distinct strings up to which an ``object`` column is encoded by comparisons
(:meth:`Strings._few`)."""
FEW_FROM = 64
"""Values from which :meth:`Strings.encode` tries :meth:`Strings._few` first."""

STRINGS = Strings()


class Deferred(Mapping[str, np.ndarray]):
    """Columns made when first read (each once): :class:`Gathered`, :class:`Stacked`.
    ``names``: the column names (a dict's keys), ``_make``: one column."""

    __slots__ = ("names", "made")

    def __init__(self, names: Mapping[str, Any]):
        self.names = names
        self.made: dict[str, np.ndarray] = {}

    def _make(self, name: str) -> np.ndarray:
        raise NotImplementedError

    def __getitem__(self, name: str) -> np.ndarray:
        got = self.made.get(name)
        if got is None:
            got = self.made[name] = self._make(name)
        return got

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: object) -> bool:
        return name in self.names


class Gathered(Deferred):
    """Columns read off rows of their sources when first asked for: a join's bindings whose
    next steps drop most of them (R8's scan of its SearchSpace parents meets 444,000 rows
    a large-clique-14 optimization, of which the next scan's probe keeps 28,000) gather
    the few columns those steps read at full height, and the rest only for the rows that
    are left. Each part is ``(columns by name, rows)``: column ``c`` of the part is
    ``columns[c][rows]`` (``rows`` None: the columns as they are); taking rows composes
    each part's rows (one gather a part, not one a column)."""

    __slots__ = ("parts",)

    def __init__(self, parts: Sequence[tuple[Mapping[str, np.ndarray], np.ndarray | None]]):
        self.parts = tuple(parts)
        super().__init__({c: i for i, (cols, _) in enumerate(self.parts) for c in cols})

    @staticmethod
    def of(cols: Mapping[str, np.ndarray], rows: np.ndarray | None
           ) -> tuple[tuple[Mapping[str, np.ndarray], np.ndarray | None], ...]:
        """The parts of the columns ``cols`` taken at ``rows`` (None: all, in order)."""
        if type(cols) is Gathered:
            if rows is None:
                return cols.parts
            return tuple((c, rows if at is None else at[rows]) for c, at in cols.parts)
        return ((cols, rows),)

    def _make(self, name: str) -> np.ndarray:
        cols, rows = self.parts[self.names[name]]
        return cols[name] if rows is None else cols[name][rows]


class Stacked(Deferred):
    """Columns of frames appended one after another, each concatenated when first read: a
    relation that grows release by release and is read in few of its columns in between
    (large-clique-14's SearchSpace: 7 appends of up to 115,000 rows of 10 columns, none read
    until the costing) is copied once for the columns read, not at every append for all."""

    __slots__ = ("parts",)

    def __init__(self, parts: dict[str, list[np.ndarray]]):
        self.parts = parts
        super().__init__(parts)

    @staticmethod
    def of(frames: Sequence[Frame]) -> Stacked:
        """The columns of ``frames`` (alike in names), one after another."""
        parts: dict[str, list[np.ndarray]] = {c: [] for c in frames[0].cols}
        for f in frames:
            cols = f.cols
            for c, got in parts.items():
                if type(cols) is Stacked and c not in cols.made:
                    got.extend(cols.parts[c])
                else:
                    got.append(cols[c])
        return Stacked(parts)

    def _make(self, name: str) -> np.ndarray:
        parts = self.parts[name]
        made = parts[0] if len(parts) == 1 else np.concatenate(parts)
        self.parts[name] = [made]  # (the appended arrays freed: not held twice)
        return made


class Frame:
    """A bag of tuples: named columns of one length, each with a column type (``cols``: a
    dict, or :class:`Gathered` columns read when first asked for)."""

    __slots__ = ("cols", "types", "height")

    def __init__(self, cols: Mapping[str, np.ndarray], types: dict[str, str], height: int):
        self.cols, self.types, self.height = cols, types, height

    # -- building and reading ------------------------------------------------------------------
    @staticmethod
    def unit() -> Frame:
        """One tuple of no columns (the bindings before a rule's first atom)."""
        return Frame({}, {}, 1)

    @staticmethod
    def empty(names: Sequence[str], types: Sequence[str]) -> Frame:
        return Frame({c: np.empty(0, dtype=NUMPY[t]) for c, t in zip(names, types, strict=True)},
                     dict(zip(names, types, strict=True)), 0)

    @staticmethod
    def from_rows(rows: Iterable[tuple], names: Sequence[str], types: Sequence[str]) -> Frame:
        rows = list(rows)
        if not rows:
            return Frame.empty(names, types)
        cols = {}
        for c, t, values in zip(names, types, zip(*rows, strict=True), strict=True):
            cols[c] = column(values, t)
        return Frame(cols, dict(zip(names, types, strict=True)), len(rows))

    def rows(self, names: Sequence[str]) -> list[tuple]:
        """The tuples, columns ``names`` in order, as Python values (strings decoded)."""
        if not self.height:
            return []
        if not names:  # tuples of no columns: as many empty tuples
            return [()] * self.height
        return list(zip(*(self.values(c) for c in names), strict=True))

    def values(self, name: str) -> list:
        """One column as Python values."""
        return self.python(name).tolist()

    def python(self, name: str) -> np.ndarray:
        """One column as the batch built-ins take it: numbers as numpy, strings ``object``."""
        col = self.cols[name]
        return STRINGS.read(col) if self.types[name] == STRING else col

    def __len__(self) -> int:
        return self.height

    def __repr__(self) -> str:
        return f"Frame({self.height} rows: {', '.join(self.cols)})"

    # -- row and column primitives -------------------------------------------------------------
    def take(self, idx: np.ndarray) -> Frame:
        if type(self.cols) is Gathered:
            return Frame(Gathered(Gathered.of(self.cols, idx)), self.types, len(idx))
        return Frame({c: a[idx] for c, a in self.cols.items()}, self.types, len(idx))

    def filter(self, mask: np.ndarray) -> Frame:
        if mask.all():
            return self
        if type(self.cols) is Gathered:
            return self.take(np.flatnonzero(mask))
        return Frame({c: a[mask] for c, a in self.cols.items()}, self.types,
                     int(np.count_nonzero(mask)))

    def with_column(self, name: str, values: np.ndarray, kind: str) -> Frame:
        return self.with_columns({name: values}, {name: kind})

    def with_columns(self, values: dict[str, np.ndarray], kinds: dict[str, str]) -> Frame:
        """The frame with the columns ``values`` (of the types ``kinds``) added."""
        if type(self.cols) is Gathered:
            cols: Mapping[str, np.ndarray] = Gathered((*self.cols.parts, (values, None)))
        else:
            cols = {**self.cols, **values}
        return Frame(cols, {**self.types, **kinds}, self.height)

    def select(self, mapping: Sequence[tuple[str, str]]) -> Frame:
        """Columns ``old → new`` in order (a column may appear under several names)."""
        return Frame({new: self.cols[old] for old, new in mapping},
                     {new: self.types[old] for old, new in mapping}, self.height)

    def clear(self) -> Frame:
        return self.take(np.empty(0, dtype=np.int64))


def column(values: Iterable[Any], kind: str) -> np.ndarray:
    """Python values (or an ``object`` array) as a column of type ``kind``."""
    if kind == STRING:
        return STRINGS.encode(values)
    if isinstance(values, np.ndarray):
        return values.astype(NUMPY[kind], copy=False)
    return np.asarray(list(values) if not isinstance(values, (list, tuple)) else values,
                      dtype=NUMPY[kind])


# -- keys ---------------------------------------------------------------------------------------
def keys(columns: Sequence[np.ndarray], n: int) -> np.ndarray:
    """One ``int64`` id per row of ``n``, equal exactly when the rows are equal on every
    column."""
    if not columns:
        return np.zeros(n, dtype=np.int64)
    packed = _packed(columns, n, 1 << 62) if n else None
    if packed is not None:  # integer columns: the packed key (in the same order, unsorted)
        return packed[0]
    ids = None
    width = 1
    for col in columns:
        if col.dtype == np.bool_:
            col = col.astype(np.int64)
        _, inv = np.unique(col, return_inverse=True)
        inv = inv.astype(np.int64).reshape(-1)
        card = int(inv.max()) + 1 if n else 1
        if ids is None:
            ids, width = inv, card
        else:
            if width * card >= 1 << 62:  # keep the ids small: renumber before mixing
                _, ids = np.unique(ids, return_inverse=True)
                ids = ids.astype(np.int64).reshape(-1)
                width = int(ids.max()) + 1
            ids = ids * card + inv
            width *= card
    assert ids is not None
    return ids


def _paired_keys(left: Frame, right: Frame, on: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Row ids of both frames on columns ``on``, comparable across the two."""
    cols = [np.concatenate((_num(left.cols[c]), _num(right.cols[c]))) for c in on]
    ids = keys(cols, left.height + right.height)
    return ids[:left.height], ids[left.height:]


def _num(a: np.ndarray) -> np.ndarray:
    return a.astype(np.int64) if a.dtype == np.bool_ else a


def _matches(lk: np.ndarray, rk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each left key, the run of right rows with that key: (start in ``order``, count),
    and ``order`` (the right rows sorted by key) as a third value."""
    order = np.argsort(rk, kind="stable")
    lo, hi = runs(rk[order], lk)
    return lo, hi - lo, order  # type: ignore[return-value]


SORTED_PROBES = 256
"""Probes from this many keys on are sorted before the binary searches (:func:`runs`)."""


def runs(sorted_keys: np.ndarray, probes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each probe, the run ``[lo, hi)`` of ``sorted_keys`` equal to it.

    Many probes are searched in sorted order and the bounds put back in the probes' order:
    numpy's binary search starts from the previous probe's place when the probes ascend, so
    a large array is walked once, cache-friendly, instead of from its middle per probe
    (measured: 220,000 keys, 30,000 probes, 15 ms unsorted, 6 ms sorted, the sort
    included)."""
    if not _sorts_probes(sorted_keys, probes):
        return (np.searchsorted(sorted_keys, probes, "left"),
                np.searchsorted(sorted_keys, probes, "right"))
    order = np.argsort(probes)
    ordered = probes[order]
    lo, hi = np.empty(len(probes), np.int64), np.empty(len(probes), np.int64)
    lo[order] = np.searchsorted(sorted_keys, ordered, "left")
    hi[order] = np.searchsorted(sorted_keys, ordered, "right")
    return lo, hi


SORTED_KEYS = 2048
"""Probes are sorted before their binary searches (:func:`runs`) only in at least this many
keys: a smaller array stays in cache whatever the probes' order, so the sort is not paid
back (large-clique-17's aggregate selection, 7,700 probes in BestCost's 1,086 keys: 73 µs
searched as they come, 117 + 92 sorted first; in one key, its bound, 14 and 286; random
keys break even around 1,000–2,000 keys)."""


def _sorts_probes(sorted_keys: np.ndarray, probes: np.ndarray) -> bool:
    return len(probes) >= SORTED_PROBES and len(sorted_keys) >= SORTED_KEYS


# -- joins --------------------------------------------------------------------------------------
def join(left: Frame, right: Frame, on: Sequence[str]) -> Frame:
    """Inner join on the columns ``on`` (present in both), bag semantics: a left row meets
    every right row with equal keys; the result has the left columns, then the right ones
    not in ``on``."""
    if not on:
        return cross(left, right)
    if not left.height or not right.height:
        return _joined(left, right, on, np.empty(0, np.int64), np.empty(0, np.int64))
    lk, rk = _paired_keys(left, right, on)
    lo, count, order = _matches(lk, rk)
    total = int(count.sum())
    li = np.repeat(np.arange(left.height, dtype=np.int64), count)
    starts = np.repeat(lo, count)
    offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    ri = order[starts + offsets]
    return _joined(left, right, on, li, ri)


def _joined(left: Frame, right: Frame, on: Sequence[str], li: np.ndarray,
            ri: np.ndarray) -> Frame:
    """The left rows ``li`` beside the right rows ``ri`` (but the right columns ``on``)."""
    named = {c: a for c, a in right.cols.items() if c not in on}
    return beside(left, li, named, {c: right.types[c] for c in named}, ri)


def beside(left: Frame, li: np.ndarray, named: Mapping[str, np.ndarray],
           kinds: Mapping[str, str], ri: np.ndarray) -> Frame:
    """The rows ``li`` of ``left``, each beside the row ``ri`` of the columns ``named`` (of
    the types ``kinds``), gathered when read (:class:`Gathered`: a join's output is often
    filtered down to a few rows next, a rule's whole-relation scan among them)."""
    return Frame(Gathered((*Gathered.of(left.cols, li), (named, ri))),
                 {**left.types, **kinds}, len(li))


def cross(left: Frame, right: Frame) -> Frame:
    if left.height == 1 and not left.cols:  # a rule's first atom: its rows as they are
        return right
    li = np.repeat(np.arange(left.height, dtype=np.int64), right.height)
    ri = np.tile(np.arange(right.height, dtype=np.int64), left.height)
    return _joined(left, right, (), li, ri)


def anti(left: Frame, right: Frame, on: Sequence[str]) -> Frame:
    """The left rows with no right row of equal keys (all of them, or none, when ``on`` is
    empty)."""
    if not on:
        return left if not right.height else left.clear()
    if not left.height or not right.height:
        return left
    lk, rk = _paired_keys(left, right, on)
    return left.filter(~np.isin(lk, rk))


def semi_mask(left: Frame, right: Frame, on: Sequence[str]) -> np.ndarray:
    """Whether each left row has a right row with equal keys."""
    if not left.height or not right.height:
        return np.zeros(left.height, dtype=bool)
    lk, rk = _paired_keys(left, right, on)
    return np.isin(lk, rk)


def lookup(left: Frame, right: Frame, on: Sequence[str], value: str
           ) -> tuple[np.ndarray, np.ndarray]:
    """For each left row, the ``value`` of a right row with equal keys (right keys are
    unique) and whether there is one."""
    n = left.height
    out = np.zeros(n, dtype=right.cols[value].dtype)
    if not n or not right.height:
        return out, np.zeros(n, dtype=bool)
    lk, rk = _paired_keys(left, right, on)
    order = np.argsort(rk)
    ordered = rk[order]
    if _sorts_probes(ordered, lk):
        at = np.argsort(lk)
        lo = np.empty(n, np.int64)
        lo[at] = np.searchsorted(ordered, lk[at])
    else:  # (keys unique: the left bound of a probe's run is its one row, if any)
        lo = np.searchsorted(ordered, lk)
    lo = np.minimum(lo, len(ordered) - 1)
    found = ordered[lo] == lk
    out[found] = right.cols[value][order[lo[found]]]
    return out, found


# -- sets and groups ----------------------------------------------------------------------------
def distinct(f: Frame) -> Frame:
    """The frame's distinct rows (a set; :func:`distinct_rows`)."""
    if f.height < 2:
        return f
    first, _ = distinct_rows(list(f.cols.values()), f.height)
    return f if len(first) == f.height else f.take(np.sort(first))


def distinct_rows(cols: Sequence[np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first row of each distinct row of the columns ``cols`` (``n`` rows), in no
    particular order, and per row the position of its distinct row among them: by row
    hash, checked column by column where two rows hash alike (rows with equal hashes but
    different values, never seen in practice, take exact keys)."""
    if not n:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    _, first, inverse = np.unique(row_hash(cols, n), return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if len(first) < n and not all(np.array_equal(c, c[first[inverse]]) for c in cols):
        _, first, inverse = np.unique(keys([_num(c) for c in cols], n), return_index=True,
                                      return_inverse=True)
        inverse = inverse.reshape(-1)
    return first, inverse


def distinct_hashed(f: Frame, by: Sequence[str], ordered: bool = True
                    ) -> tuple[Frame, np.ndarray | None, np.ndarray | None]:
    """:func:`distinct` of ``f`` by one sort of its rows' :func:`row_hash`: the distinct
    rows (the first of equal ones, in ``f``'s order), their hashes ascending, and for each of
    those the row of the result it is the hash of — what probing an :class:`Index` and
    adding to it take (:meth:`Index.probe_sorted`, :meth:`Index.add_sorted`), so a release
    hashes and sorts its rows once instead of three times. ``by``: every column's name, in
    the order they are hashed (an index's). Where small integer columns
    find the distinct rows without the hashes, only those rows are hashed (large-clique-14's
    ``Goal`` releases: 230,000 rows an optimization for 3,800 kept). ``ordered`` False: a
    caller that neither probes nor indexes by the hashes; where the rows all differ it gets
    None for both, the hashes neither argsorted nor sorted (:func:`_hashes_differ`; large-
    clique-14's ``SearchSpace`` releases, 115,000 rows an optimization, all distinct)."""
    cols = [f.cols[c] for c in by]
    if f.height < 2:
        return f, row_hash(cols, f.height), np.arange(f.height, dtype=np.int64)
    packed = _packed(cols, f.height, max(1 << 16, PACKED_ROOM * f.height))
    if packed is not None:  # small integer columns: the first of each key without a sort
        key, span = packed
        first = np.full(span, f.height, dtype=np.int64)
        np.minimum.at(first, key, np.arange(f.height, dtype=np.int64))
        keep = np.sort(first[first < f.height])
        if len(keep) < f.height:
            f = f.take(keep)
        h = row_hash([f.cols[c] for c in by], f.height)
        order = np.argsort(h)
        return f, h[order], order
    h = row_hash(cols, f.height)
    if f.height >= TABLE_FROM and _repeats(h):
        return _distinct_by_table(f, h, by)
    if not ordered and _hashes_differ(h):  # no two rows hash alike, so none are equal
        return f, None, None
    order = np.argsort(h)
    hs = h[order]
    starts = np.empty(f.height, dtype=bool)
    starts[0] = True
    np.not_equal(hs[1:], hs[:-1], out=starts[1:])
    if starts.all():  # no two rows hash alike, so none are equal
        return f, hs, order
    at = np.flatnonzero(starts)
    first = np.minimum.reduceat(order, at)  # per hash, its first row
    rep = np.empty(f.height, dtype=np.int64)
    rep[order] = first[np.cumsum(starts) - 1]
    if not all(np.array_equal(c, c[rep]) for c in f.cols.values()):
        return _distinct_exactly(f, by)
    keep = np.sort(first)
    return f.take(keep), hs[at], np.searchsorted(keep, first)


SLOTS_PER_HASH = 8
""":func:`_hashes_differ` counts hashes in 8 to 16 slots per hash: about one hash in ten
then shares its slot (at 4, one in ~5 and 2.5 ms for large-clique-17's SearchSpace
releases against 1.8; at 16, 1.7)."""

SLOT_BITS = 24
"""At most this many bits of slots in :func:`_hashes_differ` (its table of counts at most
128 MiB: a release of over 2 million rows shares more slots, no more memory)."""


def _hashes_differ(h: np.ndarray) -> bool:
    """Whether no two of the hashes ``h`` are equal, without sorting them: each hash's top
    bits number its slot in a table of counts (:data:`SLOTS_PER_HASH` slots a hash, one
    ``np.bincount``), and only the hashes that share a slot are sorted and compared — equal
    hashes share their slot, so none is missed. A release of rows that all differ (a join's
    new plans: large-clique-17's SearchSpace releases, 224,000 rows an optimization) was
    checked by sorting every hash: 7.3 ms a run, 1.8 this way."""
    bits = min((SLOTS_PER_HASH * len(h) - 1).bit_length(), SLOT_BITS)
    slot = (h.view(np.uint64) >> np.uint64(64 - bits)).astype(np.intp)
    rest = np.sort(h[np.bincount(slot)[slot] > 1])
    return not (rest[1:] == rest[:-1]).any()


TABLE_FROM = 2048
""":func:`distinct_hashed` looks the first row of each hash up in a table, not by sorting the
rows' hashes, from this many rows on when a sample of them repeats a hash (:func:`_repeats`)."""

_SAMPLE = 256


def _repeats(h: np.ndarray) -> bool:
    """Whether about :data:`_SAMPLE` of the hashes ``h``, evenly spaced, repeat one: the
    rows are then mostly duplicates (a release of OR nodes, one candidate per child of each
    new AND node: large-tree-18's ``Goal`` releases hold 28,462 rows for 2,552 distinct),
    and a release of distinct rows (a join's new plans) does not pay for the table."""
    sample = np.sort(h[::max(1, len(h) // _SAMPLE)])
    return bool((sample[1:] == sample[:-1]).any())


def _first_rows(h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For hashes ``h``: the first row of each distinct hash (in no order), and each row's
    first row of its hash — without sorting ``h``, by a table of twice as many slots as rows
    per round, a slot read off some bits of the hash: each slot keeps the least row that
    falls in it (one scatter, ``np.minimum.at``), a row whose slot holds a row of its hash
    has that row as its first (all rows of a hash fall in the same slot, so the least of
    them is the least of the slot when its hash is the slot's); the others go on to the
    next round with the next bits (none left after about two rounds)."""
    h = h.view(np.uint64) if h.dtype == np.int64 else h  # (the bits; shifts read them alike)
    n = len(h)
    bits = min(max((2 * n - 1).bit_length(), 1), 32)
    mask = np.uint64((1 << bits) - 1)
    rep = np.empty(n, dtype=np.int64)
    firsts = []
    todo = np.arange(n, dtype=np.int64)
    hs = h
    shift = 64
    while len(todo):
        shift -= bits
        if shift < 0:  # (only alike hashes would get here: one more round of all bits)
            shift = 0
        slot = ((hs >> np.uint64(shift)) & mask).astype(np.intp)
        table = np.full(1 << bits, n, dtype=np.int64)
        np.minimum.at(table, slot, todo)
        won = table[slot]
        same = h[won] == hs
        rep[todo[same]] = won[same]
        firsts.append(table[table < n])
        todo, hs = todo[~same], hs[~same]
    return (firsts[0] if len(firsts) == 1 else np.concatenate(firsts)), rep


def _distinct_by_table(f: Frame, h: np.ndarray, by: Sequence[str]
                       ) -> tuple[Frame, np.ndarray, np.ndarray]:
    """:func:`distinct_hashed` by :func:`_first_rows`: only the distinct rows' hashes are
    sorted (large-tree-18's ``Goal`` releases: 28,462 hashes sorted in 1.2 ms against a
    table's ~0.2 ms and a sort of 2,552)."""
    first, rep = _first_rows(h)
    if not all(np.array_equal(c, c[rep]) for c in f.cols.values()):
        return _distinct_exactly(f, by)
    keep = np.sort(first)
    if len(keep) < f.height:
        f, h = f.take(keep), h[keep]
    order = np.argsort(h)
    return f, h[order], order


def _distinct_exactly(f: Frame, by: Sequence[str]) -> tuple[Frame, np.ndarray, np.ndarray]:
    """:func:`distinct_hashed` where two unequal rows hash alike: by the exact
    :func:`distinct`, hashed (by the columns ``by``, in that order) and sorted again."""
    new = distinct(f)
    h = row_hash([new.cols[c] for c in by], new.height)
    order = np.argsort(h)
    return new, h[order], order


PACKED_ROOM = 4
"""Keys of integer columns are packed into one number while their ranges multiply to at most
this many times the rows (or 65,536): :func:`distinct_hashed` then finds each key's first row
in an array of that size (a relation with a few small columns and many repeated tuples, as
each rule's duplicates of a relation of OR nodes), not by sorting the rows' hashes."""


def _packed(columns: Sequence[np.ndarray], n: int, limit: int
            ) -> tuple[np.ndarray, int] | None:
    """Each row's columns as one exact ``int64`` in ``[0, span)`` and the span — distinct
    rows, distinct numbers, ordered as the rows are lexicographically — or None when a
    column is not integer (nor boolean) or the span is more than ``limit``."""
    ranges = _ranges(columns, limit)
    if ranges is None:
        return None
    lows, widths, span = ranges
    return _pack(columns, lows, widths, n), span


def _pack(columns: Sequence[np.ndarray], lows: list[int], widths: list[int], n: int
          ) -> np.ndarray:
    """The ``n`` rows of ``columns`` packed by their ranges (:func:`_ranges`): the first
    column that varies less its low, then per column a multiply and adds in place. (Not
    a zeroed key with each column's ``col - low`` added: the zeroed array and the
    temporaries made the 76 packings of a large-clique-14 optimization 1.9 ms, not 0.7.)"""
    key = None
    for col, low, width in zip(columns, lows, widths, strict=True):
        if width == 1:  # one value: a digit that is always 0
            continue
        x = col.astype(np.int64, copy=False)
        if key is None:
            key = x - low
            continue
        key *= width
        key += x
        if low:
            key -= low
    return np.zeros(n, dtype=np.int64) if key is None else key


def _ranges(columns: Sequence[np.ndarray], limit: int
            ) -> tuple[list[int], list[int], int] | None:
    """Per column its least value and the width of its range, and the product of the
    widths (:func:`_packed`'s span); None when a column is not integer (nor boolean) or the
    span is more than ``limit``."""
    widths, lows = [], []
    span = 1
    for col in columns:
        if col.dtype.kind not in "iub":
            return None
        low, high = int(col.min()), int(col.max())
        width = high - low + 1
        span *= width
        if span > limit:
            return None
        widths.append(width)
        lows.append(low)
    return lows, widths, span


def minus(f: Frame, other: Frame) -> Frame:
    """Rows of ``f`` not in ``other`` (same columns)."""
    return anti(f, other, list(f.cols))


def concat(frames: Sequence[Frame]) -> Frame:
    frames = [f for f in frames if f.height] or list(frames[:1])
    if len(frames) == 1:
        return frames[0]
    first = frames[0]
    cols = {c: np.concatenate([f.cols[c] for f in frames]) for c in first.cols}
    return Frame(cols, dict(first.types), sum(f.height for f in frames))


def stacked(frames: Sequence[Frame]) -> Frame:
    """:func:`concat`, each column concatenated when first read (:class:`Stacked`): for a
    relation that grows by appends."""
    frames = [f for f in frames if f.height] or list(frames[:1])
    if len(frames) == 1:
        return frames[0]
    return Frame(Stacked.of(frames), dict(frames[0].types), sum(f.height for f in frames))


def group_best(f: Frame, by: Sequence[str], value: str, func: str) -> tuple[np.ndarray,
                                                                             np.ndarray]:
    """Per row, its group's id (dense, in the keys' order) and per group the min or max of
    ``value``: the rows sorted by key once and each run reduced (not ``np.unique``'s inverse
    and ``np.minimum.at``: on the aggregate selection's 7,700 rows 280 µs for the inverse
    alone, the sort 120)."""
    n = f.height
    vals = f.cols[value]
    if not n:
        return np.zeros(0, dtype=np.int64), vals[:0].copy()
    key = keys([_num(f.cols[c]) for c in by], n)
    order = np.argsort(key, kind="stable")  # (rows mostly grouped: nearly a pass)
    ordered = key[order]
    starts = np.empty(n, dtype=bool)
    starts[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    ids = np.empty(n, dtype=np.int64)
    ids[order] = np.cumsum(starts) - 1
    best = (np.minimum if func == "min" else np.maximum).reduceat(vals[order],
                                                                  np.flatnonzero(starts))
    return ids, best


def aggregate(f: Frame, by: Sequence[str], value: str, func: str) -> Frame:
    """One row per group of ``by`` with the min or max of ``value`` (columns in ``f``'s
    order)."""
    if not f.height:
        return f
    ids, best = group_best(f, by, value, func)
    _, first = np.unique(ids, return_index=True)
    out = f.take(first)
    cols = dict(out.cols)
    cols[value] = best[ids[first]]
    return Frame(cols, out.types, out.height)


def runs_by(f: Frame, by: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``f`` ordered by the columns ``by`` (stable: in row order within a key)
    and the position in that order where each key's run starts (runs of values equal under
    ``==``: NaN's rows each a run of its own). For building a hash index of the tuples run
    by run (:meth:`~.python_engine.Relation.of_rows`)."""
    n = f.height
    cols = [_num(f.cols[c]) for c in by]
    if not n or not cols:
        return np.arange(n, dtype=np.int64), np.zeros(min(n, 1), dtype=np.int64)
    ordered = _runs_ordered(cols, n)
    if ordered is not None:
        return ordered
    order = np.lexsort(cols[::-1])  # (by the first column, then the next, …)
    change = np.zeros(n - 1, dtype=bool)
    for c in cols:
        ordered = c[order]
        change |= ordered[1:] != ordered[:-1]
    return order, np.flatnonzero(np.concatenate(([True], change)))


def _runs_ordered(cols: Sequence[np.ndarray], n: int
                  ) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`runs_by` of rows mostly grouped already (as an evaluation leaves a relation
    derived group by group): the runs of equal keys in row order are ordered, not the rows
    — a stable sort of the runs' keys packed into one number (:func:`_pack`), the rows
    then laid out run after run (large-tree-18's 42,000 SearchSpace tuples, 4,200 runs:
    0.6 → 0.3 ms). None where the columns do not pack or the rows are hardly grouped
    (more runs than :data:`RUNS_ORDERED_UPTO` of them: sorting the rows is as cheap)."""
    ranges = _ranges(cols, 1 << 62)
    if ranges is None:
        return None
    key = _pack(cols, ranges[0], ranges[1], n)
    head = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    if len(head) > RUNS_ORDERED_UPTO * n:
        return None
    run_key = key[head]
    by_key = np.argsort(run_key, kind="stable")  # (runs of one key stay in row order)
    length = np.diff(np.append(head, n))[by_key]
    at = np.cumsum(length) - length  # (where each run lands)
    order = np.repeat(head[by_key] - at, length) + np.arange(n, dtype=np.int64)
    ordered = run_key[by_key]
    return order, at[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


RUNS_ORDERED_UPTO = 0.25
"""The share of rows starting a run of equal keys up to which :func:`_runs_ordered` orders
the runs instead of the rows."""


# -- hashing and indexes ------------------------------------------------------------------------
_SEED = np.uint64(0x9E3779B97F4A7C15)
_MULT = np.uint64(0xBF58476D1CE4E5B9)


def row_hash(columns: Sequence[np.ndarray], n: int) -> np.ndarray:
    """A 64-bit hash per row of ``columns`` (equal rows, equal hashes; ``0.0`` and ``-0.0``
    alike). Callers compare the columns of rows whose hashes match, so a collision costs a
    comparison, never a wrong answer."""
    if not columns:
        return np.full(n, _SEED, dtype=np.uint64)
    h = None
    for col in columns:
        if col.dtype == np.float64:
            x = (col + 0.0).view(np.uint64)
        else:
            x = col.astype(np.int64, copy=False).view(np.uint64)
        if h is None:  # (the seed mixed into the first column: no array of seeds first)
            h = x ^ _SEED
        else:
            h ^= x
        h *= _MULT
        h ^= h >> np.uint64(31)
    return h


class Index:
    """Rows of a growing relation by the hash of some of their columns: sorted hashes with
    the row ids they came from, kept sorted as rows are appended."""

    __slots__ = ("hashes", "rids")

    def __init__(self, hashes: np.ndarray, rids: np.ndarray):
        order = np.argsort(hashes, kind="stable")
        self.hashes, self.rids = hashes[order], rids[order]

    def add(self, hashes: np.ndarray, rids: np.ndarray) -> None:
        if not len(hashes):
            return
        order = np.argsort(hashes, kind="stable")
        self.add_sorted(hashes[order], rids[order])

    def add_sorted(self, hashes: np.ndarray, rids: np.ndarray) -> None:
        """:meth:`add`, the hashes ascending already."""
        if not len(hashes):
            return
        # where each new entry lands: its place among the old ones plus the new ones before
        # it (ascending already: ``np.insert`` would sort these places again, and its fixed
        # cost was most of a release's index update, 36 µs on ~700 entries)
        at = np.searchsorted(self.hashes, hashes, "right")
        at += np.arange(len(at))
        old = np.ones(len(self.hashes) + len(at), dtype=bool)
        old[at] = False
        self.hashes = _merged(self.hashes, hashes, at, old)
        self.rids = _merged(self.rids, rids, at, old)

    def probe(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every (probe row, indexed row id) pair with equal hashes."""
        return _pairs(*runs(self.hashes, hashes), len(hashes), self.rids)

    def probe_sorted(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`probe` with the probes' hashes ascending (searched as they are)."""
        return _pairs(np.searchsorted(self.hashes, hashes, "left"),
                      np.searchsorted(self.hashes, hashes, "right"), len(hashes), self.rids)


def _merged(have: np.ndarray, new: np.ndarray, at: np.ndarray, old: np.ndarray) -> np.ndarray:
    """``have`` with ``new`` put at the places ``at`` of the result; ``old`` marks the
    others."""
    out = np.empty(len(old), dtype=have.dtype)
    out[at] = new
    out[old] = have
    return out


def _pairs(lo: np.ndarray, hi: np.ndarray, n: int, rids: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """The (probe, row id) pairs of the runs ``[lo, hi)`` of the ``n`` probes in a sorted
    index whose entries hold the row ids ``rids``."""
    count = hi - lo
    total = int(count.sum())
    li = np.repeat(np.arange(n, dtype=np.int64), count)
    starts = np.repeat(lo, count)
    offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    return li, rids[starts + offsets]


class KeyIndex:
    """Rows of a relation that no longer grows, by their key columns packed into one exact
    number (:func:`_packed`) instead of hashed: no collisions to compare away, and keys of a
    small span sort by radix passes over 16-bit digits (on a 224,000-row relation about
    4 ms against 17 for a stable sort of 64-bit hashes). For integer (and string-code)
    columns only: :meth:`of` says None otherwise."""

    __slots__ = ("lows", "widths", "ranks", "keys", "rids", "span", "_bounds")

    def __init__(self, lows: list[int], widths: list[int], keys: np.ndarray,
                 rids: np.ndarray, span: int, ranks: Ranks = None):
        self.lows, self.widths, self.keys, self.rids = lows, widths, keys, rids
        self.span, self.ranks = span, ranks
        self._bounds: np.ndarray | None = None

    @staticmethod
    def of(columns: Sequence[np.ndarray], n: int) -> KeyIndex | None:
        """The index of ``n`` rows by ``columns``, or None when they do not pack (wide
        columns of few values packed by rank: :func:`_by_rank`)."""
        packed = PackedKeys.of(columns, n, ranked=True)
        return None if packed is None else packed.index()

    def probe(self, values: Sequence[np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
        """Every (probe row, row id) pair with equal keys (exact: no comparison needed)."""
        probe = _probe_key(values, self.lows, self.widths, n, self.ranks)
        if self._bounds is not None or (n >= SORTED_PROBES and self.span <= max(
                DENSE_SPAN, len(self.keys), DENSE_PER_PROBE * n)):
            return _pairs(*self._dense_runs(probe), n, self.rids)
        return _pairs(*runs(self.keys, probe), n, self.rids)

    def _dense_runs(self, probe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:func:`runs` of the packed ``probe`` keys read off a table with one entry per key
        of the span (where each key's run starts), not by sorting the probes and searching:
        on large-clique-14 the probes of a growing relation's few thousand rows by the new
        plans' 2,000–22,000 parents sorted more than they searched."""
        bounds = self._bounds
        if bounds is None:  # bounds[k]: the keys below k; bounds[span + 1]: the run of -1
            bounds = np.zeros(self.span + 2, dtype=np.int64)
            np.cumsum(np.bincount(self.keys, minlength=self.span), out=bounds[1:-1])
            bounds[-1] = bounds[-2]
            self._bounds = bounds
        at = np.where(probe < 0, self.span, probe)  # (outside the ranges: an empty run)
        return bounds[at], bounds[at + 1]


class PackedKeys:
    """Rows' key columns packed into one exact number (:func:`_pack`) in row order, not
    sorted yet: a few probes are answered by a scan (:meth:`scan`: a fraction of what
    sorting the keys costs), many by the :class:`KeyIndex` it sorts into (:meth:`index`)."""

    __slots__ = ("lows", "widths", "span", "keys", "ranks", "compared")

    def __init__(self, lows: list[int], widths: list[int], span: int, keys: np.ndarray,
                 ranks: Ranks = None):
        self.lows, self.widths, self.span, self.keys = lows, widths, span, keys
        self.ranks = ranks
        """Per column, where it is packed by rank (:func:`_by_rank`), each value's rank
        above its low (-1: a value no row holds); None: every column by value."""
        self.compared = 0
        """How many probes its scans compared the keys with (for its owner's
        rent-or-buy)."""

    @staticmethod
    def of(columns: Sequence[np.ndarray], n: int, ranked: bool = False) -> PackedKeys | None:
        """The keys of ``n`` rows of ``columns``, or None when they do not pack; ``ranked``:
        wide columns of few values packed by rank where the span is wide
        (:func:`_by_rank`)."""
        if not n:
            return None
        ranges = _ranges(columns, 1 << 62)
        if ranges is None:
            return None
        lows, widths, span = ranges
        if ranked and span > DENSE_SPAN:
            digits, counts, ranks, span = _by_rank(columns, lows, widths, n)
            if ranks is not None:
                froms = [low if t is None else 0 for low, t in zip(lows, ranks, strict=True)]
                return PackedKeys(lows, counts, span, _pack(digits, froms, counts, n), ranks)
        return PackedKeys(lows, widths, span, _pack(columns, lows, widths, n))

    def index(self) -> KeyIndex:
        """The keys sorted, for binary searches."""
        order = _key_order(self.keys, self.span)
        return KeyIndex(self.lows, self.widths, self.keys[order], order, self.span,
                        self.ranks)

    def scan(self, values: Sequence[np.ndarray], n: int) -> np.ndarray:
        """The rows (ascending) whose key equals one of the ``n`` probes ``values``: every
        key compared with each probe's (a pass of about 7 µs over 42,000 keys; for a few
        probes, where sorting the keys costs as much as 50 passes)."""
        probe = np.unique(_probe_key(values, self.lows, self.widths, n, self.ranks))
        probe = probe[probe >= 0].tolist()
        self.compared += len(probe)
        if not probe:
            return np.empty(0, dtype=np.int64)
        found = self.keys == probe[0]
        for p in probe[1:]:
            found |= self.keys == p
        return np.flatnonzero(found)


class KeyTable:
    """Distinct rows by their packed key, read off a table with one entry per key of the
    span: where batch after batch of probes asks for the row holding a whole tuple (a
    revival's waves, :mod:`.revival`: on large-clique-17, 17 batches of 5 to 3,000 probes
    into 9,451 ``Goal`` rows of a span of 131,071), one gather a batch instead of sorting
    and searching."""

    __slots__ = ("lows", "widths", "ranks", "table")

    def __init__(self, lows: list[int], widths: list[int], ranks: Ranks, table: np.ndarray):
        self.lows, self.widths, self.ranks, self.table = lows, widths, ranks, table

    @staticmethod
    def of(columns: Sequence[np.ndarray], n: int, limit: int) -> KeyTable | None:
        """The table of ``n`` distinct rows of ``columns``, or None when they do not pack
        or their span is above ``limit`` entries."""
        packed = PackedKeys.of(columns, n)
        if packed is None or packed.span > limit:
            return None
        table = np.full(packed.span, -1, dtype=np.int32 if n < 1 << 31 else np.int64)
        table[packed.keys] = np.arange(n, dtype=table.dtype)
        return KeyTable(packed.lows, packed.widths, packed.ranks, table)

    def rows(self, values: Sequence[np.ndarray], n: int) -> np.ndarray:
        """Per probe of the ``n`` probes ``values``, the row holding it (-1: none)."""
        key = _probe_key(values, self.lows, self.widths, n, self.ranks)
        out = np.full(n, -1, dtype=np.int64)
        hit = key >= 0
        out[hit] = self.table[key[hit]]
        return out


def _probe_key(values: Sequence[np.ndarray], lows: list[int], widths: list[int], n: int,
               ranks: Ranks = None) -> np.ndarray:
    """The ``n`` probes ``values`` packed as keys of these ranges are (:func:`_pack`; a
    column of ``ranks`` by its table, :func:`_by_rank`); -1, below every key, for a probe
    outside them."""
    key = outside = None
    for c, (col, low, width) in enumerate(zip(values, lows, widths, strict=True)):
        if col.dtype.kind in "iub":
            x = col.astype(np.int64, copy=False) - low
        else:  # a value no integer equals (2.5, nan, inf: cast to garbage): no key
            with np.errstate(invalid="ignore"):
                x = col.astype(np.int64) - low
            x[col != x + low] = -1
        table = None if ranks is None else ranks[c]
        if table is not None:  # (a value past the range, or no row's: rank -1, outside)
            past = len(table) - 1
            x = table[np.where(x.view(np.uint64) < np.uint64(past), x, past)]
        # (the few numpy calls a column: a probe is often of a hundred keys, where
        # each call's fixed cost is the time; negative x, as unsigned, is past width)
        out = x.view(np.uint64) >= np.uint64(width)
        outside = out if outside is None else outside | out
        key = x if key is None else key * width + x
    if key is None:
        key, outside = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    key[outside] = -1
    return key


Ranks = list[np.ndarray | None] | None
"""Per key column, its table of ranks (:func:`_by_rank`) or None; None: no column ranked."""


def _by_rank(columns: Sequence[np.ndarray], lows: list[int], widths: list[int], n: int
             ) -> tuple[list[np.ndarray], list[int], Ranks, int]:
    """The ``n`` rows' key digits where each column whose range is wide and whose values
    are few within it (a set of relations among the 2**17 of large-clique-17, 9,435 of
    them; a property's two string codes, 10 and 18) counts by its value's rank among its
    values instead (a table of its range: no sort), so the span is the product of the
    columns' counts of values, not of their ranges: SearchSpace's keys by (query, child,
    property) span 18,870 instead of 2,490,216 — one radix pass to order them, not two,
    and many probes read off a table (:meth:`KeyIndex._dense_runs`) — whatever codes the
    process gave the strings. Ranks keep the values' order: the same key order, the same
    runs. Returns the digit columns (a ranked one from 0, the others as they are), their
    widths, the tables (with a slot past the range, -1, where a probe outside it reads;
    None: no column ranked) and the span."""
    digits, counts, ranks = [], [], []
    span = 1
    for col, low, width in zip(columns, lows, widths, strict=True):
        table = None
        if RANKED_FROM <= width <= n * RANKED_RANGE + DENSE_SPAN:
            x = col.astype(np.int64, copy=False) - low
            held = np.zeros(width + 1, dtype=bool)  # (+1: a probe's slot for "outside")
            held[x] = True
            count = int(np.count_nonzero(held))
            if count < width:
                table = np.cumsum(held) - 1
                table[~held] = -1
                col, width = table[x], count
        digits.append(col)
        counts.append(width)
        ranks.append(table)
        span *= width
    return digits, counts, (ranks if any(t is not None for t in ranks) else None), span


RANKED_FROM = 3
"""A key column whose range holds this many values or more may pack by rank
(:func:`_by_rank`)."""
RANKED_RANGE = 4
""":func:`_by_rank` ranks a column whose range is at most this many times the rows (plus
:data:`DENSE_SPAN`): its table costs about what a pass over the rows does."""


def _key_order(key: np.ndarray, span: int) -> np.ndarray:
    """The stable order of non-negative ``key`` below ``span``: by radix passes over 16-bit
    digits (numpy sorts 16-bit keys by radix) while at most four are needed, which beats a
    comparison sort from a few thousand keys on."""
    if len(key) < RADIX_FROM:
        return np.argsort(key, kind="stable")
    order = np.argsort(key.astype(np.uint16), kind="stable")
    shift = 16
    while span > 1 << shift:
        digit = (key[order] >> shift).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
        shift += 16
    return order


DENSE_SPAN = 1 << 16
"""A :class:`KeyIndex` of keys within a span of at most this many (or of its key count, or
:data:`DENSE_PER_PROBE` times the probes) answers many probes by a table of the span
(:meth:`KeyIndex._dense_runs`)."""

DENSE_PER_PROBE = 16
"""… or of at most this many keys per probe of one batch; once made, the table answers
every later batch. A probe searched costs about 50 ns (the probes sorted, two binary
searches), a table entry 0.6 ns, up to 6 where a table of more than a megabyte is paged in
fresh: large-clique-17's costing probes its growing PlanCost, a span of 100,000–130,000
expressions, by 7,000–12,000 parents of a rank's new plans, 0.4–0.7 ms a batch sorted and
searched against 0.1 by a table."""

RADIX_FROM = 4096
"""Keys from this many on are ordered by radix passes (:func:`_key_order`)."""
