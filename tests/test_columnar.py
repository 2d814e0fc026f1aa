"""The set-at-a-time engine (:mod:`reopt.evaluator.columnar` on :mod:`reopt.evaluator.frames`).

Two oracles: plain Python for the frame primitives (nested loops, dictionaries), and the tuple
engine for whole evaluations — the same compiled program must give the same relations and the
same counts (iterations, tuples produced and derived) whether its strata run on tuples, on
frames from the start, or on frames from the middle of a recursive stratum on (the hand-over
``auto`` does once a stratum grows). Incremental sessions built on a frame evaluation must
then follow deltas exactly as from-scratch optimizations do.
"""

from __future__ import annotations

import contextlib
import math
import operator
import os
import pickle
import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mini import closure
from randq import SHAPES, make_query, random_deltas
from rulefiles import edited_rules
from ways import WAYS, way

from reopt.api import Optimizer
from reopt.costmodel.builtins import BOOLEAN, DOUBLE, LONG, STRING
from reopt.costmodel.deltas import apply_deltas, parse_deltas
from reopt.costmodel.errors import ReoptError
from reopt.costmodel.models import cost_model
from reopt.costmodel.space import PlanSpace
from reopt.evaluator import columnar, frames, maintenance, sourcerows
from reopt.evaluator.bulk import RankFrames
from reopt.evaluator.compiler import Call, Scan, Variant
from reopt.evaluator.driver import PRUNING_MODES, evaluate, load_program
from reopt.evaluator.frames import Frame, Index
from reopt.evaluator.maintenance import MaintainedEngine, UpdateStats
from reopt.evaluator.python_engine import PythonEngine, Relation
from reopt.incremental.session import Session

PROGRAMS = {mode: load_program(pruning=mode) for mode in PRUNING_MODES}
# -- frame primitives against plain Python ------------------------------------------------------
VALUES = {LONG: st.integers(-3, 3), DOUBLE: st.sampled_from([0.0, -0.0, 1.0, 2.5, float("inf")]),
          STRING: st.sampled_from(["", "any", "sort:a", "ü"])}
TYPES = (LONG, STRING, DOUBLE)


def rows_of(types: tuple[str, ...]) -> st.SearchStrategy[list[tuple]]:
    return st.lists(st.tuples(*(VALUES[t] for t in types)), max_size=12)


def frame_of(rows: list[tuple], names: list[str], types: tuple[str, ...]) -> Frame:
    return Frame.from_rows(rows, names, types)


@settings(max_examples=200, deadline=None)
@given(left=rows_of(TYPES), right=rows_of(TYPES[:2]), on=st.integers(0, 2))
def test_join_and_anti_equal_nested_loops(left, right, on):
    lf = frame_of(left, ["a", "b", "x"], TYPES)
    rf = frame_of(right, ["a", "b"][:on] + ["y", "z"][:2 - on], TYPES[:2])
    keys = ["a", "b"][:on]
    extra = [c for c in rf.cols if c not in keys]
    got = Counter(frames.join(lf, rf, keys).rows(["a", "b", "x", *extra]))
    want = Counter(lt + tuple(v for c, v in zip(rf.cols, rt, strict=True) if c not in keys)
                   for lt in left for rt in right if lt[:on] == rt[:on])
    assert got == want
    kept = Counter(frames.anti(lf, rf, keys).rows(["a", "b", "x"]))
    assert kept == Counter(lt for lt in left if not any(lt[:on] == rt[:on] for rt in right))


@settings(max_examples=200, deadline=None)
@given(left=rows_of(TYPES), right=rows_of(TYPES[:2]), data=st.data())
def test_gathered_columns_read_the_rows_a_nested_loop_reads(left, right, data):
    """Bindings gathered when read (:class:`~.frames.Gathered`: a join's rows, then some
    of them taken, filtered, a column added) hold, column by column, what the tuples
    paired in a nested loop hold after the same steps."""
    lf = frame_of(left, ["a", "b", "x"], TYPES)
    rf = frame_of(right, ["y", "z"], TYPES[:2])
    pairs = [(i, j) for i in range(len(left)) for j in range(len(right))]
    li = np.asarray([i for i, _ in pairs], dtype=np.int64)
    ri = np.asarray([j for _, j in pairs], dtype=np.int64)
    got = Frame(frames.Gathered((*frames.Gathered.of(lf.cols, li), (rf.cols, ri))),
                {**lf.types, **rf.types}, len(pairs))
    want = [left[i] + right[j] for i, j in pairs]
    if want:
        picks = data.draw(st.lists(st.integers(0, len(want) - 1), max_size=20))
        got = got.take(np.asarray(picks, dtype=np.int64))
        want = [want[k] for k in picks]
    mask = np.asarray(data.draw(st.lists(st.booleans(), min_size=len(want),
                                         max_size=len(want))), dtype=bool)
    got = got.filter(mask).with_column("w", np.arange(int(mask.sum()), dtype=np.int64), LONG)
    want = [t + (k,) for k, t in enumerate(t for t, m in zip(want, mask, strict=True) if m)]
    assert got.rows(["a", "b", "x", "y", "z", "w"]) == want
    assert got.height == len(want) and set(got.cols) == {"a", "b", "x", "y", "z", "w"}


@settings(max_examples=100, deadline=None)
@given(chunks=st.lists(rows_of(TYPES), min_size=1, max_size=5), reads=st.lists(st.booleans()))
def test_frames_appended_one_after_another_hold_the_rows_in_order(chunks, reads):
    """A relation grown by appends whose columns are concatenated when first read
    (:func:`~.frames.stacked`) holds the rows of its appends in order, whichever of its
    columns were read (and so concatenated) between the appends."""
    names = ["a", "b", "x"]
    grown = frame_of(chunks[0], names, TYPES)
    for k, rows in enumerate(chunks[1:]):
        if k < len(reads) and reads[k]:
            grown.cols["b"]  # noqa: B018 - read: concatenated before the next append
        grown = frames.stacked([grown, frame_of(rows, names, TYPES)])
    assert grown.rows(names) == [t for rows in chunks for t in rows]
    assert grown.height == sum(map(len, chunks)) and list(grown.cols) == names


@settings(max_examples=200, deadline=None)
@given(rows=rows_of(TYPES), other=rows_of(TYPES), by=st.integers(0, 2),
       func=st.sampled_from(["min", "max"]))
def test_sets_and_groups_equal_python(rows, other, by, func):
    names = ["a", "b", "x"]
    f, g = frame_of(rows, names, TYPES), frame_of(other, names, TYPES)
    assert sorted(frames.distinct(f).rows(names), key=repr) == sorted(set(rows), key=repr)
    # the one-sort form: the same rows in the same order, each hash ascending with its row
    new, hashes, at = frames.distinct_hashed(f, names)
    assert new.rows(names) == list(dict.fromkeys(rows))
    assert hashes.tolist() == sorted(hashes.tolist()) and sorted(at.tolist()) == list(
        range(new.height))
    assert hashes.tolist() == frames.row_hash(list(new.cols.values()), new.height)[at].tolist()
    # unordered: the same rows; no hashes only where every row differs (nothing dropped)
    new, hashes, at = frames.distinct_hashed(f, names, ordered=False)
    assert new.rows(names) == list(dict.fromkeys(rows))
    assert hashes is not None or len(set(rows)) == len(rows)
    assert Counter(frames.minus(f, g).rows(names)) == Counter(r for r in rows if r not in other)
    assert Counter(frames.concat([f, g]).rows(names)) == Counter(rows) + Counter(other)
    best: dict[tuple, float] = {}
    for r in rows:
        k = r[:by]
        best[k] = r[2] if k not in best else (min if func == "min" else max)(best[k], r[2])
    got = frames.aggregate(f, names[:by], "x", func).rows([*names[:by], "x"])
    assert sorted(got, key=repr) == sorted(((*k, v) for k, v in best.items()), key=repr)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(-3, 3), st.sampled_from(["", "any", "ü"]),
                               st.booleans(), st.sampled_from([0, 5, 2**40])), max_size=30),
       width=st.integers(1, 4), packed=st.booleans())
def test_distinct_rows_of_integer_keys_are_the_first_of_each(rows, width, packed):
    """Integer columns (strings as codes, booleans) packed into one key while their ranges
    allow (a column of 2**40 and 0 does not), else hashed and sorted (``packed`` False:
    never packed): either way each distinct row once, in the order of its first occurrence,
    with its hash."""
    names, types = ["a", "b", "c", "d"][:width], (LONG, STRING, BOOLEAN, LONG)[:width]
    rows = [r[:width] for r in rows]
    f = frame_of(rows, names, types)
    with pytest.MonkeyPatch.context() as mp:
        if not packed:
            mp.setattr(frames, "_packed", lambda cols, n, limit: None)
        new, hashes, at = frames.distinct_hashed(f, names)
    assert new.rows(names) == list(dict.fromkeys(rows))
    assert hashes.tolist() == sorted(hashes.tolist()) and sorted(at.tolist()) == list(
        range(new.height))
    assert hashes.tolist() == frames.row_hash(list(new.cols.values()), new.height)[at].tolist()


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(-5, 5), st.sampled_from([7, 7, 9]), st.booleans(),
                               st.integers(2**40, 2**40 + 3)), min_size=1, max_size=30),
       order=st.permutations(range(4)), width=st.integers(1, 4))
def test_packed_keys_number_rows_by_their_ranges(rows, order, width):
    """Integer columns (negative lows, a column of one value, booleans, lows far from 0)
    packed into one key: each row's digits (its value less its column's low) read in the
    mixed radix of the columns' widths, as a plain loop over the rows computes it."""
    columns = [np.array([r[j] for r in rows]) for j in order[:width]]
    lows = [min(c.tolist()) for c in columns]
    widths = [max(c.tolist()) - low + 1 for c, low in zip(columns, lows, strict=True)]
    want = []
    for i in range(len(rows)):
        key = 0
        for c, low, w in zip(columns, lows, widths, strict=True):
            key = key * w + int(c[i]) - low
        want.append(key)
    packed = frames._packed(columns, len(rows), 1 << 62)
    assert packed is not None
    assert packed[0].tolist() == want and packed[1] == math.prod(widths)


@settings(max_examples=300, deadline=None)
@given(hashes=st.lists(st.one_of(st.integers(0, 5), st.integers(2**63 - 3, 2**63 + 3),
                                 st.integers(0, 2**64 - 1)), min_size=2, max_size=40),
       bits=st.sampled_from([1, 3, 24]))
def test_hashes_differ_exactly_when_no_two_are_equal(hashes, bits):
    """Hashes that all differ, or not: small ones (all in the first slot), ones either side
    of the top bit, any; with few slot bits (``bits``: most hashes share a slot) or many."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(frames, "SLOT_BITS", bits)
        got = frames._hashes_differ(np.array(hashes, dtype=np.uint64))
    assert got == (len(set(hashes)) == len(hashes))


@settings(max_examples=200, deadline=None)
@given(rows=rows_of(TYPES), buckets=st.sampled_from([0, 1, 3]), table=st.booleans(),
       ordered=st.booleans())
def test_distinct_rows_of_colliding_hashes_are_each_row_once(rows, buckets, table, ordered):
    """Rows of any columns (not packed: a float column) deduplicated by the sort, or by the
    table of first rows (``table``), give each distinct row once, first occurrence first,
    its hash ascending with its row; with hashes taken modulo ``buckets`` (unequal rows
    hashing alike) the answer is still exact, asked for the hashes or not (``ordered``)."""
    names = ["a", "b", "x"]
    f = frame_of(rows, names, TYPES)
    hashed = frames.row_hash
    h = hashed(list(f.cols.values()), f.height)
    if buckets:
        h %= np.uint64(buckets)
    with pytest.MonkeyPatch.context() as mp:
        if buckets:
            mp.setattr(frames, "row_hash", lambda cols, n: hashed(cols, n) % np.uint64(buckets))
        if table:
            mp.setattr(frames, "TABLE_FROM", 2)
            mp.setattr(frames, "_repeats", lambda h: True)
        new, hashes, at = frames.distinct_hashed(f, names, ordered)
    assert new.rows(names) == list(dict.fromkeys(rows))
    if hashes is None:
        assert not ordered and len(set(rows)) == len(rows)
        return
    assert hashes.tolist() == sorted(hashes.tolist()) and sorted(at.tolist()) == list(
        range(new.height))
    if not buckets:
        assert hashes.tolist() == h[[rows.index(r) for r in new.rows(names)]][at].tolist()


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.tuples(st.integers(0, 7), st.sampled_from([0, 1, 20, 40, 61])),
                       min_size=1, max_size=200))
def test_first_rows_of_hashes_by_table_equal_a_dict(values):
    """``_first_rows``: each distinct hash's first row, and each row's, as a dict of first
    occurrences gives them — also for hashes alike in the bits one round's slot reads (small
    values shifted by 0, 1, 20, 40 or 61 bits: several rounds, the last on the low bits)."""
    h = np.array([v << shift for v, shift in values], dtype=np.uint64)
    first_of: dict[int, int] = {}
    for i, x in enumerate(h.tolist()):
        first_of.setdefault(x, i)
    first, rep = frames._first_rows(h)
    assert sorted(first.tolist()) == sorted(first_of.values())
    assert rep.tolist() == [first_of[x] for x in h.tolist()]


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.sampled_from(["any", "sort:a", "ü", "", "x"]), min_size=1,
                       max_size=frames.FEW + 1, unique=True).flatmap(
           lambda pool: st.lists(st.sampled_from(pool), min_size=frames.FEW_FROM - 4,
                                 max_size=frames.FEW_FROM * 3)),
       known=st.lists(st.sampled_from(["any", "x", "z"]), max_size=3))
def test_strings_of_an_array_get_the_codes_a_list_gets(values, known):
    """An ``object`` column (compared per distinct string when it has few) and the same
    values as a list (looked up one by one) get the same codes, new strings numbered in the
    order they first occur."""
    by_array, by_list = frames.Strings(), frames.Strings()
    for strings in (by_array, by_list):
        strings.encode(known)
    column = np.empty(len(values), dtype=object)
    column[:] = values
    assert by_array.encode(column).tolist() == by_list.encode(list(values)).tolist()
    assert by_array.text == by_list.text


@settings(max_examples=100, deadline=None)
@given(chunks=st.lists(st.lists(st.integers(0, 5), max_size=8), min_size=1, max_size=4),
       probe=st.lists(st.integers(0, 6), max_size=8))
def test_index_grown_by_appends_finds_what_a_rebuilt_one_finds(chunks, probe):
    def h(values: list[int]) -> np.ndarray:
        return frames.row_hash([np.asarray(values, dtype=np.int64)], len(values))

    def ascending(values: list[int]) -> tuple[np.ndarray, np.ndarray]:
        order = np.argsort(h(values))
        return h(values)[order], order

    idx = Index(h(chunks[0]), np.arange(len(chunks[0]), dtype=np.int64))
    grown = Index(h(chunks[0]), np.arange(len(chunks[0]), dtype=np.int64))  # the sorted forms
    everything = list(chunks[0])
    for chunk in chunks[1:]:
        idx.add(h(chunk), np.arange(len(everything), len(everything) + len(chunk)))
        hashes, order = ascending(chunk)
        grown.add_sorted(hashes, order + len(everything))
        everything += chunk
    want = Counter((i, j) for i, p in enumerate(probe) for j, e in enumerate(everything)
                   if p == e)
    li, ri = idx.probe(h(probe))
    assert Counter(zip(li.tolist(), ri.tolist(), strict=True)) == want
    hashes, order = ascending(probe)
    li, ri = grown.probe_sorted(hashes)
    assert Counter(zip(order[li].tolist(), ri.tolist(), strict=True)) == want


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(-3, 5), st.booleans(), st.integers(0, 2**40)),
                     min_size=1, max_size=30),
       probe=st.lists(st.tuples(st.integers(-5, 7), st.booleans(), st.integers(0, 2**40)),
                      max_size=12),
       cols=st.sampled_from([(0,), (1,), (0, 1), (2, 0), (0, 1, 2)]))
def test_key_index_finds_the_rows_with_equal_columns(rows, probe, cols):
    """A key index's probes get exactly the rows equal on every key column (a nested
    loop's pairs), probe values outside the rows' ranges included."""
    rows += [rows[0]]  # a repeated row: both its ids
    probe += [rows[-1]]
    def columns(tuples: list[tuple]) -> list[np.ndarray]:
        dtypes = (np.int64, np.bool_, np.int64)
        return [np.asarray([t[c] for t in tuples], dtype=dtypes[c]) for c in cols]

    idx = frames.KeyIndex.of(columns(rows), len(rows))
    assert idx is not None
    li, ri = idx.probe(columns(probe), len(probe))
    want = Counter((i, j) for i, p in enumerate(probe) for j, r in enumerate(rows)
                   if all(p[c] == r[c] for c in cols))
    assert Counter(zip(li.tolist(), ri.tolist(), strict=True)) == want
    assert frames.KeyIndex.of([np.asarray([0.5] * len(rows))], len(rows)) is None


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(-3, 300), st.booleans(), st.integers(0, 40)),
                     min_size=1, max_size=30),
       probe=st.lists(st.tuples(st.integers(-5, 305), st.booleans(), st.integers(-2, 42)),
                      max_size=12),
       cols=st.sampled_from([(0,), (1,), (0, 1), (2, 0), (0, 1, 2)]))
def test_key_index_read_off_its_table_pairs_as_its_binary_search(rows, probe, cols):
    """Many probes of a key index of a small span are read off a table of the span
    (``KeyIndex._dense_runs``): the same pairs in the same order as the binary searches
    give (probes in order, each key's rows ascending), the nested loop's pairs, probe
    values outside the rows' ranges included (fails when a run's bounds are off by one or
    an outside probe reads the last key's run)."""
    rows += [rows[0]]
    probe += [rows[-1], (-9, True, 99)]

    def columns(tuples: list[tuple]) -> list[np.ndarray]:
        dtypes = (np.int64, np.bool_, np.int64)
        return [np.asarray([t[c] for t in tuples], dtype=dtypes[c]) for c in cols]

    def probed(sorted_from: int) -> list[tuple[int, int]]:
        idx = frames.KeyIndex.of(columns(rows), len(rows))
        assert idx is not None
        with mock.patch.object(frames, "SORTED_PROBES", sorted_from), \
                mock.patch.object(frames, "DENSE_SPAN", 1 << 20):
            li, ri = idx.probe(columns(probe), len(probe))
        return list(zip(li.tolist(), ri.tolist(), strict=True))

    by_table, by_search = probed(1), probed(len(probe) + 1)
    assert by_table == by_search
    want = Counter((i, j) for i, p in enumerate(probe) for j, r in enumerate(rows)
                   if all(p[c] == r[c] for c in cols))
    assert Counter(by_table) == want


@settings(max_examples=60, deadline=None)
@given(keys=st.lists(st.integers(0, 5000), min_size=1, max_size=40),
       probe=st.lists(st.integers(-3, 5003), min_size=1, max_size=300),
       later=st.lists(st.integers(-3, 5003), max_size=8))
def test_a_wide_key_index_probed_by_many_reads_its_table_and_keeps_it(keys, probe, later):
    """A key index whose span is above ``DENSE_SPAN`` and its key count but at most
    ``DENSE_PER_PROBE`` times a batch's probes reads that batch off a table of the span,
    and every later batch, however small, off the same table: the pairs the binary
    searches give, in the same order (probes in order, each key's rows ascending), and
    the nested loop's (fails when no table is made for such a batch, or a small batch's
    probes outside the keys read a run off it)."""
    keys += [0, 5000]
    probe = (probe * (320 // len(probe) + 1))[:max(320, len(probe))]  # (5,001 keys: 16 × 320)

    def pairs(idx: frames.KeyIndex, values: list[int]) -> list[tuple[int, int]]:
        li, ri = idx.probe([np.asarray(values, dtype=np.int64)], len(values))
        return list(zip(li.tolist(), ri.tolist(), strict=True))

    column = [np.asarray(keys, dtype=np.int64)]
    with mock.patch.object(frames, "DENSE_SPAN", 16):
        by_table = frames.KeyIndex.of(column, len(keys))
        by_search = frames.KeyIndex.of(column, len(keys))
        assert by_table is not None and by_search is not None
        with mock.patch.object(frames, "DENSE_PER_PROBE", 0):
            searched = [pairs(by_search, probe), pairs(by_search, later)]
        assert by_search._bounds is None
        read = [pairs(by_table, probe), pairs(by_table, later)]
        assert by_table._bounds is not None
    assert read == searched
    for values, got in zip((probe, later), read, strict=True):
        assert Counter(got) == Counter((i, j) for i, p in enumerate(values)
                                       for j, k in enumerate(keys) if p == k)


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from([-7, 3, 100, 5000, 2**40]), st.booleans(),
                               st.sampled_from([0, 10, 18])), min_size=1, max_size=40),
       probe=st.lists(st.tuples(st.sampled_from([-8, -7, 3, 4, 100, 5001, 2**40, 2**41]),
                                st.booleans(), st.sampled_from([-1, 0, 9, 10, 11, 18, 19])),
                      max_size=30),
       cols=st.sampled_from([(0,), (2,), (0, 2), (2, 1, 0), (1, 2)]))
def test_a_key_index_packed_by_rank_pairs_as_one_packed_by_value(rows, probe, cols):
    """A key index whose wide columns of few values are packed by their ranks (the span
    above ``DENSE_SPAN``) gives the pairs of one packed by value, in the same order, by
    its binary searches and by its table, and the nested loop's — probes of values no row
    holds, inside the range and past either end, included (fails when a value outside
    the range reads a rank, or a rank does not keep the values' order)."""
    probe += [rows[-1]]

    def columns(tuples: list[tuple]) -> list[np.ndarray]:
        dtypes = (np.int64, np.bool_, np.int64)
        return [np.asarray([t[c] for t in tuples], dtype=dtypes[c]) for c in cols]

    def pairs(idx: frames.KeyIndex, sorted_from: int) -> list[tuple[int, int]]:
        with mock.patch.object(frames, "SORTED_PROBES", sorted_from):
            idx._bounds = None
            li, ri = idx.probe(columns(probe), len(probe))
        return list(zip(li.tolist(), ri.tolist(), strict=True))

    with mock.patch.object(frames, "DENSE_SPAN", 2):
        ranked = frames.KeyIndex.of(columns(rows), len(rows))
    by_value = frames.PackedKeys.of(columns(rows), len(rows)).index()
    assert ranked is not None and by_value.ranks is None
    assert ranked.ranks is not None or ranked.span == by_value.span
    assert ranked.rids.tolist() == by_value.rids.tolist()
    want = pairs(by_value, len(probe) + 1)
    assert pairs(ranked, 1) == pairs(ranked, len(probe) + 1) == want
    assert Counter(want) == Counter((i, j) for i, p in enumerate(probe)
                                    for j, r in enumerate(rows)
                                    if all(p[c] == r[c] for c in cols))


def test_strings_read_as_one_string_broadcast_where_every_code_is_the_same():
    """A column of one code throughout is read as its string broadcast (read-only, stride
    0), whether the codes are written out or broadcast themselves; any other column as
    the decoded strings, element for element."""
    strings = frames.Strings()
    codes = strings.encode(["any", "sort:a", "join"])
    n = frames.FEW_FROM + 3
    for column in (np.full(n, codes[2]), np.broadcast_to(codes[2:3], (n,))):
        got = strings.read(column)
        assert got.strides == (0,) and not got.flags.writeable and got.tolist() == ["join"] * n
    mixed = np.asarray([codes[0]] * (n - 1) + [codes[1]])
    assert strings.read(mixed).tolist() == ["any"] * (n - 1) + ["sort:a"]
    assert strings.read(mixed[:3]).tolist() == ["any"] * 3


def test_strings_of_one_value_broadcast_get_the_codes_of_the_values_written_out():
    """An ``object`` column of one string broadcast (stride 0, not compared row by row)
    gets the codes the same strings written out get, a new string its next code."""
    by_view, by_copy = frames.Strings(), frames.Strings()
    for strings in (by_view, by_copy):
        strings.encode(["x", "any"])
    for value in ("any", "new"):
        view = np.broadcast_to(np.array([value], dtype=object), (frames.FEW_FROM + 5,))
        assert view.strides == (0,)
        assert by_view.encode(view).tolist() == by_copy.encode(view.copy()).tolist()
    assert by_view.text == by_copy.text == ["x", "any", "new"]


def test_key_index_probed_with_floats_matches_equal_values_only():
    """Probe values of a float column match the integer keys they equal (3.0 is 3, as a
    lookup of tuples finds it) and nothing else (2.5, nan, and values past int64)."""
    idx = frames.KeyIndex.of([np.asarray([1, 2, 3, 3], dtype=np.int64)], 4)
    assert idx is not None
    probe = np.asarray([3.0, 2.5, np.nan, 1.0, 1e300, -0.0], dtype=np.float64)
    li, ri = idx.probe([probe], len(probe))
    got = sorted(zip(li.tolist(), ri.tolist(), strict=True))
    want = sorted((i, j) for i, p in enumerate(probe.tolist())
                  for j, k in enumerate([1, 2, 3, 3]) if p == k)
    assert got == want == [(0, 2), (0, 3), (3, 0)]


def test_key_index_probed_below_a_later_columns_range_matches_nothing():
    """A probe value below a column's least value (and one above its greatest) finds no
    row, even where its packed key would equal another row's: (1, -1) packs as 1·6 - 1,
    the key of (0, 5)."""
    a, b = np.asarray([0, 1], dtype=np.int64), np.asarray([5, 0], dtype=np.int64)
    idx = frames.KeyIndex.of([a, b], 2)
    assert idx is not None and idx.widths == [2, 6]
    probe = [np.asarray([1, 0, 0, 0], dtype=np.int64), np.asarray([-1, 6, 5, 11],
                                                                   dtype=np.int64)]
    li, ri = idx.probe(probe, 4)
    assert sorted(zip(li.tolist(), ri.tolist(), strict=True)) == [(2, 0)]


@pytest.mark.parametrize("span", [7, 2**16, 2**16 + 1, 2**40, 2**62])
def test_radix_key_order_is_the_stable_sort(span):
    """Keys ordered by 16-bit radix passes (from RADIX_FROM keys on) come out in the order
    of a stable sort, repeated keys in row order."""
    rng = np.random.default_rng(span % 1000)
    n = frames.RADIX_FROM + 100
    keys = rng.integers(0, span, n, dtype=np.int64)
    keys[::7] = keys[0]  # many repeats of one key
    want = np.argsort(keys, kind="stable")
    assert np.array_equal(frames._key_order(keys, span), want)


@settings(max_examples=30, deadline=None)
@given(keys=st.lists(st.integers(0, 40), max_size=60),
       probes=st.lists(st.integers(0, 41), min_size=frames.SORTED_PROBES - 5,
                       max_size=frames.SORTED_PROBES + 40))
def test_runs_of_many_probes_are_the_equal_keys(keys, probes):
    """Probes searched in sorted order (many of them) get each its own run of equal keys."""
    sorted_keys = np.asarray(sorted(keys), dtype=np.uint64)
    for sorted_from in (1, frames.SORTED_KEYS):  # (probes sorted first, and searched as they come)
        with mock.patch.object(frames, "SORTED_KEYS", sorted_from):
            lo, hi = frames.runs(sorted_keys, np.asarray(probes, dtype=np.uint64))
        for p, a, b in zip(probes, lo.tolist(), hi.tolist(), strict=True):
            equal = [i for i, k in enumerate(sorted(keys)) if k == p]
            assert (a, b - a) == ((equal[0], len(equal)) if equal else (a, 0))
            assert sorted(keys)[:a] == [k for k in sorted(keys) if k < p]


def _key_frame(rows: list[tuple[int, int, float]]) -> frames.Frame:
    return frames.Frame.from_rows(rows, ["a", "b", "v"], ["long", "long", "double"])


@settings(max_examples=40, deadline=None)
@given(right=st.dictionaries(st.tuples(st.integers(0, 5), st.integers(-3, 30)),
                             st.floats(-5, 5), min_size=1, max_size=40),
       left=st.lists(st.tuples(st.integers(0, 6), st.integers(-4, 31)),
                     min_size=frames.SORTED_PROBES - 5, max_size=frames.SORTED_PROBES + 30))
def test_lookup_finds_each_rows_one_right_value(right, left):
    """A lookup in unique right keys gives each left row its key's value or not found, with
    the probes searched as they come and sorted first."""
    rf = _key_frame([(a, b, v) for (a, b), v in right.items()])
    lf = _key_frame([(a, b, 0.0) for a, b in left])
    for sorted_from in (1, frames.SORTED_KEYS):
        with mock.patch.object(frames, "SORTED_KEYS", sorted_from):
            out, found = frames.lookup(lf, rf, ["a", "b"], "v")
        assert found.tolist() == [k in right for k in left]
        assert [o for o, f in zip(out.tolist(), found.tolist(), strict=True) if f] == [
            right[k] for k in left if k in right]


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 3), st.integers(-2, 9), st.floats(-9, 9)),
                     max_size=80),
       func=st.sampled_from(["min", "max"]))
def test_group_best_numbers_groups_in_key_order_and_finds_their_best(rows, func):
    """Each row's group id is its key's rank among the keys, and each group's best its
    values' min or max."""
    ids, best = frames.group_best(_key_frame(rows), ["a", "b"], "v", func)
    ranks = {k: i for i, k in enumerate(sorted({(a, b) for a, b, _ in rows}))}
    assert ids.tolist() == [ranks[(a, b)] for a, b, _ in rows]
    pick = min if func == "min" else max
    assert best.tolist() == [pick(v for a, b, v in rows if (a, b) == k) for k in ranks]


def test_a_relation_from_a_frame_makes_its_tuples_once_and_only_when_read():
    made = []

    def make() -> list[tuple]:
        made.append(1)
        return [(1, "a"), (2, "b")]

    rel = Relation.of_rows(make, 2)
    assert len(rel) == 2 and not made  # its size without its tuples
    assert rel.rows == {(1, "a"), (2, "b")} and rel.index((1,))[("a",)] == [(1, "a")]
    assert rel.add([(3, "c"), (1, "a")]) == [(3, "c")] and len(rel) == 3
    assert made == [1] and type(rel) is Relation and not hasattr(rel, "_make")
    again = type(Relation.of_rows(make, 2)).of_rows(make, 2)  # over one not built yet
    copied = pickle.loads(pickle.dumps(again))  # pickled as the relation it becomes
    assert type(copied) is Relation and copied.rows == again.rows == {(1, "a"), (2, "b")}
    assert len(copied) == len(again) == 2 and type(again) is Relation and made == [1, 1]


def python_index(rows, cols: tuple[int, ...]) -> dict[tuple, set[tuple]]:
    out: dict[tuple, set[tuple]] = {}
    for r in rows:
        out.setdefault(tuple(r[c] for c in cols), set()).add(r)
    return out


@settings(max_examples=150, deadline=None)
@given(rows=rows_of(TYPES), cols=st.sampled_from([(), (0,), (1,), (2,), (0, 1), (2, 1, 0)]),
       extra=rows_of(TYPES))
def test_an_index_cut_from_a_frames_runs_groups_as_python_does(rows, cols, extra):
    """A relation built from a frame indexes its tuples by slicing the frame's runs
    (:func:`frames.runs_by`): the same buckets as grouping the tuples in Python (equal keys
    under ``==``: ``0.0`` and ``-0.0`` alike, strings by value), also for an index asked
    for after the relation changed (then built tuple by tuple)."""
    names = ["a", "b", "x"]
    f = frames.distinct(frame_of(rows, names, TYPES))
    rel = Relation.of_rows(lambda: f.rows(names), f.height,
                           lambda key: frames.runs_by(f, [names[j] for j in key]))
    idx = rel.index(cols)
    want = python_index(set(rows), cols)
    assert {k: set(b) for k, b in idx.items()} == want
    assert all(len(b) == len(set(b)) for b in idx.values())
    rel.add(extra)
    assert {k: set(b) for k, b in rel.index(cols).items()} == python_index(rel.rows, cols)
    other = tuple(c for c in (1, 0) if c not in cols)
    assert {k: set(b) for k, b in rel.index(other).items()} == python_index(rel.rows, other)


@settings(max_examples=150, deadline=None)
@given(runs=st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 2), st.integers(4, 8)),
                     min_size=1, max_size=12),
       scattered=st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 2)), max_size=4))
def test_runs_by_on_grouped_rows_is_a_stable_sort_by_key(runs, scattered):
    """:func:`frames.runs_by` on rows mostly grouped already (runs of equal keys, the path
    that orders the runs, not the rows) and on a few scattered ones: the order is Python's
    stable sort of the row numbers by key, and a run starts where the key changes."""
    keys = [(a, b) for a, b, length in runs for _ in range(length)] + scattered
    f = Frame({"a": np.asarray([k[0] for k in keys], dtype=np.int64),
               "b": np.asarray([k[1] for k in keys], dtype=np.int64)},
              {"a": LONG, "b": LONG}, len(keys))
    order, starts = frames.runs_by(f, ["a", "b"])
    want = sorted(range(len(keys)), key=lambda i: keys[i])
    assert order.tolist() == want
    assert starts.tolist() == [i for i, r in enumerate(want)
                               if i == 0 or keys[r] != keys[want[i - 1]]]


def test_strings_keep_their_order_in_comparisons():
    """Strings are codes inside frames; ``<`` must still compare the strings themselves."""
    f = frame_of([("b",), ("a",), ("c",)], ["$s"], (STRING,))
    stratum = columnar.ColumnarStratum.__new__(columnar.ColumnarStratum)
    from reopt.evaluator.ast import Const, Var

    mask = stratum._compare(f, "<", Var("s"), Const("b"))
    assert mask.tolist() == [False, True, False]


# -- whole evaluations against the tuple engine ---------------------------------------------------
def relations(spaces: list[PlanSpace], mode: str, how: str):
    with way(how):
        ev = evaluate(spaces, "python", program=PROGRAMS[mode])
    counts = (ev.stats.iterations, ev.stats.derived, ev.stats.produced, ev.stats.deleted)
    return {p: ev.rows(p) for p in ev.relations}, counts


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 6), seed=st.integers(0, 2**31),
       model=st.sampled_from(["io", "cout"]), mode=st.sampled_from(list(PRUNING_MODES)))
def test_every_way_derives_the_same_relations(shape, n, seed, model, mode):
    if mode == "none" and model == "io" and n > 4:
        n = 4  # without pruning the io space holds a tuple per distinct plan cost
    q, cat = make_query(shape, n, seed)
    spaces = [PlanSpace(q, cat, cost_model(model))]
    want = relations(spaces, mode, "tuples")
    for how in WAYS[1:]:
        assert relations(spaces, mode, how) == want, how


def test_hash_collisions_are_told_apart(monkeypatch):
    """Every row hashing alike: the value checks behind each probe keep the answer exact."""
    q, cat = make_query("clique", 4, 7)
    spaces = [PlanSpace(q, cat, cost_model("io"))]
    want = relations(spaces, "aggsel", "tuples")
    monkeypatch.setattr(frames, "row_hash", lambda cols, n: np.zeros(n, dtype=np.uint64))
    monkeypatch.setattr(columnar, "row_hash", frames.row_hash)
    assert relations(spaces, "aggsel", "frames") == want


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 6), seed=st.integers(0, 2**31),
       model=st.sampled_from(["io", "cout"]),
       mode=st.sampled_from([m for m in PRUNING_MODES if m != "none"]),
       how=st.sampled_from(["frames", "handover"]), rebuilding=st.booleans())
def test_updates_after_a_frame_evaluation_equal_from_scratch(shape, n, seed, model, mode, how,
                                                             rebuilding):
    """Sessions whose evaluation ran on frames (``frames``) or on tuples (``handover``: its
    costing stratum), both maintained on frames — the source tuples re-derived picked on
    arrays (:mod:`~reopt.evaluator.sourcerows`) whatever their number — against
    from-scratch optimizations. ``rebuilding``: every other update evaluates afresh from
    the start or midway (keeping the source relation, its frame and its arrays), and the
    next one follows from the rebuilt state."""
    q, cat = make_query(shape, n, seed)
    rng = random.Random(seed)
    ops = cost_model(model).operators
    with way(how), mock.patch.object(sourcerows, "PICK_FROM", 0):  # (picked on arrays)
        o = Optimizer(q, cat, cost_model=model, optimizer="declarative", engine="python",
                      pruning=mode)
        o.optimize()
        for i, delta in enumerate(random_deltas(q, rng, 4, ops, observe=True)):
            if rebuilding:
                o._session.engine.rebuild_share = (0.0, math.inf, 0.2, math.inf)[i % 4]
            try:
                step = o.update([delta])
            except ReoptError:
                continue  # a delta the estimates cannot honour: rejected, state unchanged
            with way("tuples"):
                fresh = Optimizer(q, cat, cost_model=model, optimizer="declarative",
                                  engine="python", pruning=mode)
                fresh.adjustments = o.adjustments
                again = fresh.optimize()
            assert step.cost == again.cost
            assert {p: o._evaluation.rows(p) for p in o._evaluation.relations} == \
                {p: fresh._evaluation.rows(p) for p in fresh._evaluation.relations}
            eng = o._session.engine  # the arrays tell the held groups as the layer holds them
            held = eng.complete[eng.plan.target].index(tuple(range(eng.plan.key)))
            for arrays in filter(None, eng._source_rows.values()):
                assert arrays.held_count == Counter(
                    h for h in map(arrays.hash_of, held) if h is not None)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(-3, 3), st.sampled_from(["", "any", "ü"]),
                               st.integers(-3, 3)), min_size=1, max_size=20, unique=True),
       cols=st.sampled_from([(0,), (1,), (0, 1), (2, 1), (0, 2)]),
       extra=st.lists(st.tuples(st.sampled_from([-9, 1, 2.0, True, "any", "zz"]),
                                st.sampled_from(["any", "", "new", 3])), max_size=3),
       colliding=st.booleans(), from_columns=st.booleans())
def test_readers_are_the_tuples_whose_columns_hold_a_key(rows, cols, extra, colliding,
                                                         from_columns):
    """:meth:`~reopt.evaluator.sourcerows.SourceRows.readers` (an update's reach of the
    parents' source tuples on arrays) against a filter in Python: the tuples whose columns
    ``cols`` equal a key, keys taken from the tuples and made up (values absent, of other
    types: then None, for the join in Python, or the right tuples); by packed keys, and by
    hashes with every hash alike (collisions confirmed away); the tuples picked from the
    built ones or made from the columns."""
    frame = frame_of(rows, ["c0", "c1", "c2"], (LONG, STRING, LONG))
    built = np.fromiter(rows, object, len(rows))
    hashing = (mock.patch.object(sourcerows, "row_hash",
                                 lambda cs, n: np.zeros(n, np.uint64))
               if colliding else mock.patch.object(sourcerows, "row_hash", frames.row_hash))
    packing = (mock.patch.object(sourcerows.PackedKeys, "of", lambda cs, n: None)
               if colliding else mock.patch.object(sourcerows, "KeyIndex", frames.KeyIndex))
    with hashing, packing:
        picker = sourcerows.SourceRows.of(None if from_columns else built, frame, (0,), {},
                                          ())
        assert picker is not None
        keys = {tuple(r[c] for c in cols) for r in rows[::2]}
        keys |= {tuple(e[i % 2] for i in range(len(cols))) for e in extra}
        got = picker.readers(cols, keys)
        again = [picker.readers(cols, keys)  # (scanned, then from the sorted index)
                 for _ in range(sourcerows.COMPARED_BEFORE_INDEX + 1)]
    want = [r for r in rows if tuple(r[c] for c in cols) in keys]
    assert all(a is None if got is None else Counter(a) == Counter(got) for a in again)
    if got is None:  # (only for a value the columns cannot hold as it is)
        assert any(type(k[i]) is not (str if c == 1 else int)
                   for k in keys for i, c in enumerate(cols))
    else:
        assert Counter(got) == Counter(want)


def test_picked_source_tuples_are_those_passing_the_variants_tests_in_python():
    """What :class:`~reopt.evaluator.sourcerows.SourceRows` picks for a variant and some
    groups, after updates moved which groups are held, equals the groups' source tuples
    that pass the variant's tests evaluated in Python on the tuples (the comparisons with
    ``operator``, the held groups looked up in the complete layer): for every rule variant
    and its cut, on a query large enough to leave SearchSpace on a frame."""
    from reopt.evaluator.maintenance import source_tests

    q, cat = make_query("clique", 6, 3)
    with way("frames"):
        o = Optimizer(q, cat, cost_model="cout", optimizer="declarative", engine="python",
                      pruning="all")
        o.optimize()
        rng = random.Random(3)
        for delta in random_deltas(q, rng, 3, cost_model("cout").operators):
            o.update([delta])
    eng = o._session.engine
    plan = eng.plan
    source, cols, _ = plan.sources[0]
    picker = eng._arrays(source, cols)
    assert picker is not None
    held = eng.complete[plan.target].index(tuple(range(plan.key)))
    idx = eng.complete[source].index(cols)
    groups = sorted(idx, key=repr)
    rng.shuffle(groups)
    some = groups[:len(groups) // 2]
    picked = 0
    for v in (*(v for _, _, v in plan.sources), *(v for _, v in plan.enter)):
        tests = source_tests(v, plan.target, plan.key)

        def passes(r: tuple, tests=tests) -> bool:
            for kind, what, sides in tests:
                if kind == "held":
                    if tuple(r[c] for c in what) not in held:
                        return False
                elif not what(*(r[x] if k == "col" else x for k, x in sides)):
                    return False
            return True

        want = Counter(r for g in some for r in idx[g] if passes(r))
        got = Counter(picker.pick(id(v), some))
        assert got == want
        picked += len(got)
    assert picked and picked < sum(len(idx[g]) for g in some) * 3  # (some, not all)
    # every key hashing alike: a child looks held whenever any group is, so more tuples
    # are kept (the loops then drop them), never fewer
    rel = eng.complete[source]
    with mock.patch.object(sourcerows, "row_hash", lambda cols, n: np.zeros(n, np.uint64)):
        colliding = sourcerows.SourceRows.of(rel.as_built(), eng.frames[source][2], cols,
                                             {id(v): source_tests(v, plan.target, plan.key)
                                              for _, _, v in plan.sources}, held)
        assert colliding is not None  # (picking in here: a variant's hashes are made then)
        for _, _, v in plan.sources:
            assert Counter(picker.pick(id(v), some)) <= Counter(colliding.pick(id(v), some))
        assert sum(len(colliding.pick(id(v), some)) for _, _, v in plan.sources) > picked / 2
    assert any(t[1] is operator.eq for t in source_tests(plan.sources[0][2], plan.target,
                                                          plan.key))


# -- a rank's re-derivation on frames (bulk) ----------------------------------------------------
@contextmanager
def bulk_way(how: str) -> Iterator[None]:
    """Every rank an update re-derives run on frames (:mod:`~reopt.evaluator.bulk`) whatever
    its size, after an evaluation run ``how`` (``tuples``: none of it on frames, so no
    source tuples picked on arrays; else picked there whatever their number)."""
    patches = [mock.patch.object(maintenance, "BULK_FROM", 0),
               mock.patch.object(sourcerows, "PICK_FROM", 0)]
    if how == "tuples":
        patches += [mock.patch.dict(os.environ, {"REOPT_COLUMNAR": "auto"}),
                    *(mock.patch.object(columnar, c, 10**12)
                      for c in ("MIN_TUPLES", "MIN_DELTA", "MIN_SELECTED"))]
    with contextlib.ExitStack() as stack:
        if how != "tuples":
            stack.enter_context(way(how))
        for p in patches:
            stack.enter_context(p)
        yield


def _maintained(program, space: PlanSpace, bounded: bool) -> Session:
    session = Session(program, [space], "python")
    session.engine = MaintainedEngine(program, session.ctx, bounded=bounded)
    session.optimize()
    return session


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 6), seed=st.integers(0, 2**31),
       model=st.sampled_from(["io", "cout"]),
       mode=st.sampled_from([m for m in PRUNING_MODES if m != "none"]),
       how=st.sampled_from(["frames", "handover", "tuples"]), bounded=st.booleans())
def test_ranks_re_derived_on_frames_equal_the_loops_and_from_scratch(shape, n, seed, model,
                                                                     mode, how, bounded):
    """Every rank of every update re-derived on frames, beside a twin session whose updates
    run the generated loops only: after every delta both hold a from-scratch evaluation's
    relations, the same complete layer, and their updates derived as many candidates (the
    loops' distinct form in a bounded layer, every derivation in an unbounded one)."""
    q, cat = make_query(shape, n, seed)
    m = cost_model(model)
    program = PROGRAMS[mode]
    with bulk_way(how):
        bulk = _maintained(program, PlanSpace(q, cat, m), bounded)
    with way("tuples"):
        loops = _maintained(program, PlanSpace(q, cat, m), bounded)
    ran = Counter()
    real = RankFrames.derive

    def counted(self, v, source, delta):
        ran[id(v)] += 1
        return real(self, v, source, delta)

    adj = bulk.ctx[0].adjustments
    rederived = 0
    for d in random_deltas(q, random.Random(seed), 4, m.operators):
        adj = apply_deltas(parse_deltas(d), q, cat, adj, m.operators)
        with bulk_way(how), mock.patch.object(RankFrames, "derive", counted):
            got = bulk.update({0: adj})
        with way("tuples"):
            want = loops.update({0: adj})
        scratch = evaluate([PlanSpace(q, cat, m, adj)], "python", program=program)
        for pred in program.schemas:
            assert got.evaluation.rows(pred) == scratch.rows(pred), pred
        assert {p: r.rows for p, r in bulk.engine.complete.items()} == \
            {p: r.rows for p, r in loops.engine.complete.items()}
        mine, theirs = got.stats or UpdateStats(), want.stats or UpdateStats()
        assert (mine.derived, mine.rederived) == (theirs.derived, theirs.rederived)
        rederived += mine.rederived
    assert not bulk.engine._unframed
    assert ran or not rederived  # (each rank re-derived ran on frames)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 6), seed=st.integers(0, 2**31),
       model=st.sampled_from(["io", "cout"]), share=st.floats(0.1, 1.0),
       distinct=st.booleans())
def test_a_variant_on_frames_derives_the_bag_the_loops_derive(shape, n, seed, model, share,
                                                              distinct):
    """:meth:`~reopt.evaluator.bulk.RankFrames.derive` of each rule of the maintained
    relation over some of its source tuples, reading the complete layer's tuples, derives
    the very bag the generated loops derive (their distinct form or not): each tuple as
    many times. Under ``cout`` a group's plans tie on cost (every join method costs the
    same), so the distinct form derives markedly fewer."""
    q, cat = make_query(shape, n, seed)
    with way("tuples"):
        session = _maintained(PROGRAMS["all"], PlanSpace(q, cat, cost_model(model)), True)
    eng = session.engine
    eng.program = eng.complete_program
    rng = random.Random(seed)
    for source, _, v in eng.plan.sources:
        rows = sorted(eng.complete[source].rows, key=repr)
        some = rng.sample(rows, max(1, int(len(rows) * share)))
        frame = Frame.from_rows(some, columnar.names(len(some[0])), PROGRAMS["all"].schemas[
            source])
        got = RankFrames(eng, eng.complete, distinct).derive(v, source, frame)
        want = eng.run_variant(v, eng.complete, {source: Relation(some)}, distinct)
        assert Counter(got.rows(columnar.names(len(eng.program.schemas[v.head_pred])))) == \
            Counter(want)


def test_a_variant_scanning_a_relation_without_a_key_runs_on_tuples(tmp_path):
    """A rule joining a relation of the complete layer without binding any of its columns
    (a cross product) cannot read it by key: the variant raises
    :class:`~reopt.evaluator.bulk.Unframed`, the update runs it through the loops, and
    stays exact."""
    rules = edited_rules(tmp_path, "lExpr = 0,\n    Fn_scansummary",
                         "lExpr = 0, JoinMethod(_),\n    Fn_scansummary")
    program = load_program(rules, pruning="aggsel")
    q, cat = make_query("chain", 4, 1)
    m = cost_model("cout")
    with bulk_way("tuples"):
        session = _maintained(program, PlanSpace(q, cat, m), True)
        adj = session.ctx[0].adjustments
        for d in random_deltas(q, random.Random(1), 3, m.operators):
            adj = apply_deltas(parse_deltas(d), q, cat, adj, m.operators)
            res = session.update({0: adj})
            scratch = evaluate([PlanSpace(q, cat, m, adj)], "python", program=program)
            for pred in program.schemas:
                assert res.evaluation.rows(pred) == scratch.rows(pred), pred
    assert session.engine._unframed


def test_a_bad_mode_is_one_line(monkeypatch):
    monkeypatch.setenv("REOPT_COLUMNAR", "sometimes")
    with pytest.raises(ReoptError, match="REOPT_COLUMNAR='sometimes'"):
        columnar.mode()


# -- releases that need not look their tuples up (columnar.unseen) -----------------------------
EMBEDDING = """
Q(x, y) :- E(x, y).
Q(x, y) :- P(x, y, z).
P(x, y, z) :- Q(x, y), E(y, z).
"""
"""Every rule of P reads Q once and repeats its columns first: P's tuples from new Q tuples
are new. Q has a rule reading no relation of the stratum: not so."""
E_ROWS = [(1, 2), (2, 3), (3, 4), (4, 1)]


def _compiled(text: str):
    from datacases import FEATURES, TEST_BUILTINS

    from reopt.evaluator.compiler import compile_program
    from reopt.evaluator.parser import parse

    return compile_program(parse(text, "<test>"), TEST_BUILTINS, {"E": ("long", "long")},
                           FEATURES)


@pytest.mark.parametrize("text, want", [
    (EMBEDDING, {"P"}),
    # a rule of P reading no relation of the stratum derives tuples a later Q tuple repeats
    (EMBEDDING + "P(x, y, z) :- E(x, y), E(y, z).\n", set()),
    # P's columns hold a Q tuple at different places in its two rules
    (EMBEDDING + "P(y, x, z) :- Q(x, y), E(y, z).\n", set()),
    # a rule of P reading Q twice: its variant from the second atom holds an old Q tuple
    (EMBEDDING + "P(x, y, z) :- Q(x, y), Q(y, z).\n", set()),
])
def test_releases_skip_the_lookup_only_where_no_tuple_can_repeat(text, want):
    """columnar.unseen: which relations' releases need not look their new tuples up in what
    they hold; and, each way the engine runs, the same relations of the same sizes with the
    same counts of tuples derived — a release that skipped its lookup wrongly would keep a
    tuple twice (the second rule set above repeats P(1, 2, 3) once Q(1, 2) is new)."""
    program = _compiled(text)
    stratum = next(s for s in program.strata if "P" in s.preds)
    assert columnar.unseen(program, stratum, stratum.preds) == want
    results = []
    for how in WAYS:
        with way(how):
            rels, stats = PythonEngine(program, {}).evaluate({"E": E_ROWS})
        results.append(({p: (len(rels[p]), rels[p].rows) for p in ("P", "Q")},
                        {p: stats.derived.get(p) for p in ("P", "Q")}))
    assert results[1:] == results[:-1]
    if len(want) or "E(x, y), E(y, z)" in text:  # (the first two: the paths of two edges)
        paths = {(x, y, z) for x, y in E_ROWS for y2, z in E_ROWS if y2 == y}
        assert results[0][0]["P"] == (len(paths), paths)


# -- the tuple engine handing a stratum to frames midway (columnar.takes_over) -----------------
CLOSURE = """
T(x, y) :- E(x, y).
T(x, z) :- T(x, y), E(y, z).
"""


@pytest.mark.parametrize("edges, handed", [
    # a path 0 -> 6: the closure's iterations derive 6, 5, 4, 3, 2, 1 new pairs; the one after
    # the first that derived MIN_DELTA (3) goes on on frames with its own delta (5 pairs)
    ([(i, i + 1) for i in range(6)], [5]),
    # a star out of 0: one iteration of 6 pairs, then none (its largest iteration is its last)
    ([(0, i) for i in range(1, 7)], []),
    # two edges: no iteration derives MIN_DELTA
    ([(0, 1), (1, 2)], []),
])
def test_a_stratum_moves_to_frames_after_a_large_iteration_it_goes_on_from(
        monkeypatch, edges, handed):
    """``auto`` hands a recursive stratum to frames with the delta of the iteration following
    one of at least MIN_DELTA new tuples, not with the large one itself: a stratum whose
    largest iteration is its last stays on tuples. Its relations are those of tuples only."""
    program = _compiled(CLOSURE)
    calls: list[int] = []
    resume = columnar.resume

    def spy(engine, stratum, delta, fresh):
        calls.append(sum(len(d) for d in delta.values()))
        resume(engine, stratum, delta, fresh)

    with way("tuples"):
        want = PythonEngine(program, {}).evaluate({"E": edges})[0]["T"].rows
    monkeypatch.setattr(columnar, "resume", spy)
    monkeypatch.setattr(columnar, "MIN_DELTA", 3)
    monkeypatch.setenv("REOPT_COLUMNAR", "auto")
    got = PythonEngine(program, {}).evaluate({"E": edges})[0]["T"].rows
    assert calls == handed
    assert got == want == closure(set(edges))




FANNING = """
A(x) :- Root(x).
B(x, y) :- A(x), E(x, y).
A(y) :- B(x, y).
"""


@pytest.mark.parametrize("expected, handed", [
    # each A node has two B edges: the delta {A: 2} (the tree's second level) is expected to
    # derive 2 × 2 B tuples, as the delta {A: 1} derived 2: on frames from there
    (1.0, [2]),
    # without the expectation: after the first iteration of 4 new tuples ({B: 4}), with {A: 4}
    (10**12, [4]),
])
def test_a_stratum_moves_to_frames_before_an_iteration_expected_to_be_large(
        monkeypatch, expected, handed):
    """``auto`` also hands a recursive stratum to frames with a delta whose iteration is
    expected to derive MIN_DELTA × EXPECTED tuples: its size times what the last iteration
    started by a delta of the same relations derived per tuple (columnar.Yields). The
    relations are those of tuples only, and those of the tree by hand."""
    from datacases import FEATURES, TEST_BUILTINS

    from reopt.evaluator.compiler import compile_program
    from reopt.evaluator.parser import parse

    program = compile_program(parse(FANNING, "<test>"), TEST_BUILTINS,
                              {"E": ("long", "long"), "Root": ("long",)}, FEATURES)
    edges = [(i, 2 * i + c) for i in range(1, 8) for c in (0, 1)]  # a binary tree 1..15
    calls: list[int] = []
    resume = columnar.resume

    def spy(engine, stratum, delta, fresh):
        calls.append(sum(len(d) for d in delta.values()))
        resume(engine, stratum, delta, fresh)

    inputs = {"E": edges, "Root": [(1,)]}
    with way("tuples"):
        want = PythonEngine(program, {}).evaluate(inputs)[0]
    monkeypatch.setattr(columnar, "resume", spy)
    monkeypatch.setattr(columnar, "MIN_DELTA", 3)
    monkeypatch.setattr(columnar, "EXPECTED", expected)
    monkeypatch.setenv("REOPT_COLUMNAR", "auto")
    got = PythonEngine(program, {}).evaluate(inputs)[0]
    assert calls == handed
    assert set(got["A"].rows) == set(want["A"].rows) == {(n,) for n in range(1, 16)}
    assert set(got["B"].rows) == set(want["B"].rows) == set(edges)

# -- which strata start on frames (columnar.wanted) --------------------------------------------
SCHEDULED = """
Reach(x, k, 0) :- Root(x, k).
Reach(y, k, d + w) :- Best(x, k, d), Edge(x, y, w).
Best(x, k, min<d>) :- Reach(x, k, d).
Cap(x, c) :- Limit(x, c).
.schedule descending Fn_level Reach Best.
.aggsel Best.
"""


@pytest.mark.parametrize("bound, edges, want", [
    (False, 8, True),   # 2 roots + 8 edges read: MIN_TUPLES (10)
    (True, 8, False),   # pruned by a bound: 10 is below 10 × BOUNDED_READS (12.5)
    (True, 11, True),   # 13 read
    (False, 7, False),  # 9 read
])
def test_a_stratum_a_bound_prunes_needs_more_tuples_read_to_start_on_frames(
        monkeypatch, bound, edges, want):
    """``auto`` runs a stratum on frames from MIN_TUPLES tuples read from below, and one with
    a relation pruned by a ``.bound`` from BOUNDED_READS times as many (it derives a part of
    what it reads)."""
    from datacases import FEATURES, TEST_BUILTINS

    from reopt.evaluator.compiler import compile_program
    from reopt.evaluator.parser import parse

    text = SCHEDULED + (".bound Reach Cap.\n" if bound else "")
    program = compile_program(parse(text, "<test>"), TEST_BUILTINS,
                              {"Root": ("long", "long"), "Edge": ("long", "long", "long"),
                               "Limit": ("long", "long")}, FEATURES)
    stratum = next(s for s in program.strata if "Reach" in s.preds)
    assert bool(program.features.bound) == bound
    engine = PythonEngine(program, {})
    engine.start({"Root": [(1, 1), (2, 2)], "Edge": [(i, i + 10, 1) for i in range(edges)],
                  "Limit": []})
    monkeypatch.setattr(columnar, "MIN_TUPLES", 10)
    monkeypatch.setattr(columnar, "BOUNDED_READS", 1.25)
    monkeypatch.setenv("REOPT_COLUMNAR", "auto")
    assert columnar.wanted(engine, stratum) is want


def test_every_row_only_for_each_row_once_in_order() -> None:
    """A built-in's row output lets the bindings go ungathered only when it is 0, 1, …,
    n - 1 (h67): a repeated, skipped or reordered row, or a row count other than the
    bindings', is gathered; beyond the kept range of row numbers the range grows."""
    from reopt.evaluator.columnar import _every_row

    assert _every_row(np.arange(5, dtype=np.int64), 5)
    assert _every_row(np.empty(0, dtype=np.int64), 0)
    assert not _every_row(np.array([0, 0, 2]), 3)
    assert not _every_row(np.array([1, 0, 2]), 3)
    assert not _every_row(np.arange(4, dtype=np.int64), 5)
    big = 5 * 1024 + 3
    assert _every_row(np.arange(big, dtype=np.int64), big)
    row = np.arange(big, dtype=np.int64)
    row[-1] = 0
    assert not _every_row(row, big)


# -- a delta variant of a stratum on tuples run on frames (columnar.batched) --------------------
@contextmanager
def batching() -> Iterator[list[int]]:
    """Strata stay on tuples, and every delta variant whose built-ins all have a batch form of
    their own runs on frames (:func:`columnar.batched`), whatever its delta, its last yield
    and the size of what else it reads; yields the deltas' sizes it ran on."""
    ran: list[int] = []
    real = columnar.run_batched

    def spy(engine, v, delta):
        ran.append(len(delta[v.delta_pred]))
        return real(engine, v, delta)

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ, {"REOPT_COLUMNAR": "auto"}))
        for name in ("MIN_TUPLES", "MIN_DELTA", "MIN_SELECTED", "EXPECTED", "SMALL_READ"):
            stack.enter_context(mock.patch.object(columnar, name, 10**12))
        stack.enter_context(mock.patch.object(columnar, "BATCHED_DELTA", 1))
        stack.enter_context(mock.patch.object(columnar, "BATCHED_YIELD", 0.0))
        stack.enter_context(mock.patch.object(columnar, "run_batched", spy))
        yield ran


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 6), seed=st.integers(0, 2**31),
       model=st.sampled_from(["io", "cout"]), mode=st.sampled_from(list(PRUNING_MODES)))
def test_delta_variants_run_on_frames_derive_what_tuples_do(shape, n, seed, model, mode):
    """A delta variant the tuple engine runs on frames for one iteration derives the same bag
    as its generated loop: the same relations, iterations and counts of tuples produced and
    derived as on tuples only (h67: the enumeration's splits of a delta of OR nodes, one
    batch call of ``Fn_split`` instead of one per node)."""
    if mode == "none" and model == "io" and n > 4:
        n = 4  # without pruning the io space holds a tuple per distinct plan cost
    q, cat = make_query(shape, n, seed)
    spaces = [PlanSpace(q, cat, cost_model(model))]
    want = relations(spaces, mode, "tuples")
    with batching() as ran:
        ev = evaluate(spaces, "python", program=PROGRAMS[mode])
    assert ran  # (the enumeration's splits at least)
    got = ({p: ev.rows(p) for p in ev.relations},
           (ev.stats.iterations, ev.stats.derived, ev.stats.produced, ev.stats.deleted))
    assert got == want


def test_which_delta_variants_run_on_frames(monkeypatch):
    """columnar.batched: a delta of BATCHED_DELTA tuples on, from a variant whose last run
    derived BATCHED_YIELD tuples per delta tuple, whose built-ins all have a batch form of
    their own, and that reads nothing else larger than SMALL_READ tuples nor an older
    version of a relation."""
    program = PROGRAMS["all"]
    enumeration = next(s for s in program.strata if "SearchSpace" in s.preds)
    costing = next(s for s in program.strata if "PlanCost" in s.preds)
    q, cat = make_query("chain", 3, 1)
    engine = PythonEngine(program, {0: PlanSpace(q, cat, cost_model("io"))})
    engine.start({})
    monkeypatch.setenv("REOPT_COLUMNAR", "auto")

    def by_calls(names: set[str]) -> Variant:
        return next(v for v in enumeration.deltas
                    if {op.name for op in v.ops if isinstance(op, Call)} == names)

    split = by_calls({"Fn_isleaf", "Fn_split"})
    phyop = by_calls({"Fn_isleaf", "Fn_phyop"})  # Fn_phyop: its tuple form row by row
    at = columnar.BATCHED_DELTA
    yld = columnar.BATCHED_YIELD
    assert columnar.batched(engine, split, at, yld)
    assert not columnar.batched(engine, split, at - 1, yld)
    assert not columnar.batched(engine, split, at, yld / 2)
    assert not columnar.batched(engine, phyop, at, yld)
    monkeypatch.setattr(columnar, "SMALL_READ", 0)  # JoinMethod now too large to read
    assert not columnar.batched(engine, split, at, yld)
    monkeypatch.setattr(columnar, "SMALL_READ", 10**12)
    old = next(v for v in costing.deltas
               if any(isinstance(op, Scan) and op.version == "old" for op in v.ops))
    assert not columnar.batched(engine, old, at, yld)
    monkeypatch.setenv("REOPT_COLUMNAR", "never")
    assert not columnar.batched(engine, split, at, yld)
