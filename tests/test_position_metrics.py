"""Position- and source-resolved statistics and the MetricSums accumulator."""

import pytest
import torch

from tsctl.algo.position_metrics import (
    RELATIVE_LABELS,
    MetricSums,
    absolute_bins,
    absolute_labels,
    relative_deciles,
    split_by_source,
)


def as_numbers(pairs):
    return {k: (float(s), int(c)) for k, (s, c) in pairs.items()}


def ragged(lengths, t):
    """Right-padded mask and values equal to each token's position."""
    mask = torch.arange(t) < torch.tensor(lengths).unsqueeze(-1)
    values = torch.arange(t, dtype=torch.float32).expand(len(lengths), t).clone()
    return values, mask


def test_absolute_labels():
    assert absolute_labels([0, 4, 8, 16, 32, 64]) == ["0-3", "4-7", "8-15", "16-31", "32-63", "64+"]


def test_absolute_bins_exact_counts():
    values, mask = ragged([10, 5], 10)
    got = as_numbers(absolute_bins(values, mask, [0, 4, 8]))
    # row 0: positions 0..9, row 1: positions 0..4
    assert got == {
        "0-3": (2 * (0 + 1 + 2 + 3), 8),
        "4-7": (4 + 5 + 6 + 7 + 4, 5),
        "8+": (8 + 9, 2),
    }


def test_absolute_bins_empty_bin_and_left_padding():
    values, mask = ragged([3, 2], 4)
    right = as_numbers(absolute_bins(values, mask, [0, 2, 8]))
    assert right == {"0-1": (2.0, 4), "2-7": (2.0, 1), "8+": (0.0, 0)}
    # the same responses left-padded: positions are counted over response tokens, not columns
    left_mask = torch.tensor([[0, 1, 1, 1], [0, 0, 1, 1]], dtype=torch.bool)
    left_values = torch.tensor([[9.0, 0, 1, 2], [9.0, 9, 0, 1]])
    assert as_numbers(absolute_bins(left_values, left_mask, [0, 2, 8])) == right


def test_positions_follow_response_mask_when_loss_mask_drops_tokens():
    values, response = ragged([6], 6)
    loss_mask = torch.tensor([[0, 0, 0, 1, 1, 1]], dtype=torch.bool)  # prefix of 3 tokens left out
    got = as_numbers(absolute_bins(values, loss_mask, [0, 4], response_mask=response))
    assert got == {"0-3": (3.0, 1), "4+": (9.0, 2)}
    deciles = as_numbers(relative_deciles(values, loss_mask, response_mask=response))
    # positions 3, 4, 5 of 6 -> bins 30/6=5, 40/6=6, 50/6=8
    assert [deciles[k][1] for k in RELATIVE_LABELS] == [0, 0, 0, 0, 0, 1, 1, 0, 1, 0]


def test_bad_edges():
    values, mask = ragged([2], 2)
    for edges in ([], [1, 4], [0, 4, 4], [0, 8, 4]):
        with pytest.raises(ValueError):
            absolute_bins(values, mask, edges)


def test_relative_deciles_counts():
    values, mask = ragged([10, 5, 20], 20)
    got = as_numbers(relative_deciles(values, mask))
    assert list(got) == list(RELATIVE_LABELS)
    # length 10: one per decile; length 5: deciles 0, 2, 4, 6, 8; length 20: two per decile
    counts = [got[k][1] for k in RELATIVE_LABELS]
    assert counts == [1 + 1 + 2, 1 + 0 + 2, 1 + 1 + 2, 1 + 0 + 2, 1 + 1 + 2, 1 + 0 + 2, 1 + 1 + 2, 1 + 0 + 2, 1 + 1 + 2, 1 + 0 + 2]
    # decile 0 sums: position 0 (len 10) + position 0 (len 5) + positions 0, 1 (len 20)
    assert got["00-10"][0] == 1.0
    assert got["90-100"][0] == 9 + 18 + 19


def source_example():
    # row 0: plain, 4 tokens; row 1: prefix of 2 then suffix of 3; row 2: prefix 1, suffix 1, pad
    source = torch.tensor([[0, 0, 0, 0, 0], [1, 1, 2, 2, 2], [1, 2, 0, 0, 0]], dtype=torch.int8)
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], dtype=torch.bool)
    values = torch.tensor([[1.0, 2, 3, 4, 100], [10, 20, 30, 40, 50], [5, 6, 100, 100, 100]])
    return values, mask, source


def test_split_by_source():
    values, mask, source = source_example()
    got = as_numbers(split_by_source(values, mask, source))
    assert got == {"plain": (10.0, 4), "prefix": (35.0, 3), "suffix": (126.0, 4)}


def test_absolute_bins_by_source():
    values, mask, source = source_example()
    got = as_numbers(absolute_bins(values, mask, [0, 2], source=source))
    assert got == {
        "plain/0-1": (3.0, 2),
        "plain/2+": (7.0, 2),
        "prefix/0-1": (35.0, 3),
        "prefix/2+": (0.0, 0),
        "suffix/0-1": (6.0, 1),
        "suffix/2+": (120.0, 3),
    }
    deciles = as_numbers(relative_deciles(values, mask, source=source))
    assert len(deciles) == 30
    assert sum(c for _, c in deciles.values()) == int(mask.sum())
    assert deciles["suffix/50-60"] == (6.0, 1)  # row 2: position 1 of 2


def test_metric_sums_aggregate_across_micro_batches():
    torch.manual_seed(0)
    values = torch.randn(6, 8)
    mask = torch.rand(6, 8) > 0.3
    whole = MetricSums()
    whole.add_tokens("ratio", values, mask)
    parts = MetricSums()
    parts.add_tokens("ratio", values[:1], mask[:1])
    parts.add_tokens("ratio", values[1:], mask[1:])
    a, b = whole.means(), parts.means()
    assert set(a) == {"ratio", "ratio/min", "ratio/max"}
    for k in a:
        assert a[k] == pytest.approx(b[k], abs=1e-12)
    assert a["ratio"] == pytest.approx(values[mask].double().mean().item())
    assert a["ratio/min"] == pytest.approx(values[mask].min().item())
    assert a["ratio/max"] == pytest.approx(values[mask].max().item())


def test_metric_sums_pairs_and_empty():
    sums = MetricSums()
    values, mask, source = source_example()
    sums.add_pairs("clip", split_by_source(values, mask, source))
    sums.add_pairs("clip", split_by_source(values, torch.zeros_like(mask), source))
    sums.add("reward", 3.0, 4)
    sums.add("reward", 1.0, 4)
    sums.add("nothing", 0.0, 0)
    sums.add_tokens("never", values, torch.zeros_like(mask))
    got = sums.means()
    assert got == {"clip/plain": 2.5, "clip/prefix": pytest.approx(35 / 3), "clip/suffix": 31.5, "reward": 0.5}
