"""Chapter 1: attention, masks and multi-head attention, against PyTorch's own kernels."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from annotated.ch01_attention import (
    MultiHeadAttention,
    attention,
    dot_product_spread,
    padding_mask,
    softmax_saturation,
    subsequent_mask,
    walk_example,
    walk_heads,
)
from annotated.figures.ch01_attention import (
    all_queries_chart,
    decoder_masks_chart,
    heads_chart,
    one_query_chart,
    one_query_steps,
    saturation_chart,
    vectors_chart,
)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(1234)


def copy_into_torch(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    """An nn.MultiheadAttention holding the same weights as ours."""
    theirs = nn.MultiheadAttention(ours.d_model, ours.h, batch_first=True).eval()
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
        theirs.out_proj.weight.copy_(ours.w_o.weight)
        theirs.out_proj.bias.copy_(ours.w_o.bias)
    return theirs


# ---------------------------------------------------------------- scaled dot-product attention


@pytest.mark.parametrize("shape", [(5, 16), (3, 7, 32), (2, 4, 9, 64)])
def test_attention_equals_torch_sdpa_without_mask(shape):
    q, k, v = torch.randn(*shape), torch.randn(*shape), torch.randn(*shape)
    ours, weights = attention(q, k, v)
    theirs = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(shape[:-1]))


def test_attention_equals_torch_sdpa_with_mask_and_different_lengths():
    q, k, v = torch.randn(2, 8, 5, 64), torch.randn(2, 8, 11, 64), torch.randn(2, 8, 11, 32)
    keep = torch.rand(2, 1, 5, 11) > 0.5
    keep[..., 3] = True  # every query sees at least one key
    ours, weights = attention(q, k, v, mask=keep)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    assert ours.shape == (2, 8, 5, 32)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    assert (weights.masked_select(~keep.expand_as(weights)) == 0).all()


def test_attention_matches_equation_1_by_hand():
    q, k, v = (
        torch.randn(4, 8, dtype=torch.float64),
        torch.randn(6, 8, dtype=torch.float64),
        torch.randn(6, 3, dtype=torch.float64),
    )
    scores = [
        [sum(q[i, c] * k[j, c] for c in range(8)) / math.sqrt(8) for j in range(6)]
        for i in range(4)
    ]
    expected = torch.tensor(scores).softmax(-1) @ v
    ours, _ = attention(q, k, v)
    torch.testing.assert_close(ours, expected)


def test_fully_masked_row_gives_zeros_not_nan():
    q, k, v = torch.randn(1, 3, 4), torch.randn(1, 5, 4), torch.randn(1, 5, 4)
    keep = torch.ones(1, 3, 5, dtype=torch.bool)
    keep[0, 1] = False
    out, weights = attention(q, k, v, mask=keep)
    assert torch.isfinite(out).all()
    assert (weights[0, 1] == 0).all() and (out[0, 1] == 0).all()


def test_attention_gradients_are_finite_under_masks():
    q = torch.randn(2, 4, 8, requires_grad=True)
    keep = subsequent_mask(4) & torch.tensor([[[True, True, False, False]]])
    out, _ = attention(q, q, q, mask=keep)
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


def test_attention_rejects_bad_shapes_and_masks():
    q, k, v = torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match="same last dimension"):
        attention(q, torch.randn(2, 5, 7), v)
    with pytest.raises(ValueError, match="same length"):
        attention(q, k, torch.randn(2, 4, 8))
    with pytest.raises(ValueError, match="does not broadcast"):
        attention(q, k, v, mask=torch.ones(2, 3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):
        attention(q, k, v, mask=torch.ones(2, 3, 5))


# ---------------------------------------------------------------- masks


@pytest.mark.parametrize("size", [1, 2, 7])
def test_subsequent_mask_never_allows_the_future(size):
    mask = subsequent_mask(size)
    assert mask.shape == (1, size, size) and mask.dtype == torch.bool
    for i in range(size):
        for j in range(size):
            assert bool(mask[0, i, j]) == (j <= i)


def test_masked_attention_output_ignores_future_positions():
    x = torch.randn(1, 6, 16)
    changed = x.clone()
    changed[:, 4:] = torch.randn(1, 2, 16)  # rewrite the future of position 3
    out, weights = attention(x, x, x, mask=subsequent_mask(6))
    out2, _ = attention(changed, changed, changed, mask=subsequent_mask(6))
    torch.testing.assert_close(out[:, :4], out2[:, :4])
    assert (weights[0].triu(diagonal=1) == 0).all()


def test_padding_mask_hides_pads_whatever_their_values():
    pad = 0
    tokens = torch.tensor([[3, 4, 5, pad, pad], [6, 7, 8, 9, 2]])
    mask = padding_mask(tokens, pad)
    assert mask.shape == (2, 1, 5)
    assert mask.tolist() == [[[True, True, True, False, False]], [[True, True, True, True, True]]]
    mha = MultiHeadAttention(32, 4).eval()
    x = torch.randn(2, 5, 32)
    y = x.clone()
    y[0, 3:] = 100 * torch.randn(2, 32)  # garbage at the pad positions
    with torch.no_grad():
        torch.testing.assert_close(mha(x, x, x, mask)[0, :3], mha(y, y, y, mask)[0, :3])


def test_padding_mask_rejects_wrong_rank():
    with pytest.raises(ValueError, match="batch, len"):
        padding_mask(torch.tensor([1, 2, 0]), 0)


# ---------------------------------------------------------------- multi-head attention


def test_multi_head_attention_shapes_and_parameter_count():
    mha = MultiHeadAttention(512, 8)
    assert (mha.d_k, mha.d_v) == (64, 64)
    out = mha(torch.randn(2, 10, 512), torch.randn(2, 7, 512), torch.randn(2, 7, 512))
    assert out.shape == (2, 10, 512)
    assert sum(p.numel() for p in mha.parameters()) == 4 * (512 * 512 + 512)


def test_multi_head_attention_keeps_weights_when_asked():
    mha = MultiHeadAttention(64, 4).eval()
    mha.keep_weights = True
    mha(torch.randn(3, 5, 64), torch.randn(3, 6, 64), torch.randn(3, 6, 64))
    assert mha.weights.shape == (3, 4, 5, 6)
    torch.testing.assert_close(mha.weights.sum(-1), torch.ones(3, 4, 5))


def test_self_attention_with_padding_equals_nn_multihead_attention():
    ours = MultiHeadAttention(64, 8).eval()
    theirs = copy_into_torch(ours)
    tokens = torch.tensor([[5, 6, 7, 8, 0, 0], [5, 6, 7, 8, 9, 3]])
    x = torch.randn(2, 6, 64)
    keep = padding_mask(tokens, pad_id=0)
    with torch.no_grad():
        expected, _ = theirs(x, x, x, key_padding_mask=~keep.squeeze(1))
        torch.testing.assert_close(ours(x, x, x, keep), expected, atol=1e-5, rtol=1e-5)


def test_causal_self_attention_equals_nn_multihead_attention():
    ours = MultiHeadAttention(96, 6).eval()
    theirs = copy_into_torch(ours)
    x = torch.randn(3, 7, 96)
    with torch.no_grad():
        expected, _ = theirs(x, x, x, attn_mask=~subsequent_mask(7)[0])
        torch.testing.assert_close(
            ours(x, x, x, subsequent_mask(7)), expected, atol=1e-5, rtol=1e-5
        )


def test_encoder_decoder_attention_equals_nn_multihead_attention():
    ours = MultiHeadAttention(512, 8).eval()
    theirs = copy_into_torch(ours)
    queries, memory = torch.randn(2, 4, 512), torch.randn(2, 9, 512)
    with torch.no_grad():
        expected, _ = theirs(queries, memory, memory)
        torch.testing.assert_close(ours(queries, memory, memory), expected, atol=1e-5, rtol=1e-5)


def test_custom_head_widths_follow_table3_rows():
    mha = MultiHeadAttention(512, 8, d_k=16, d_v=64)
    assert mha.w_q.weight.shape == (128, 512) and mha.w_o.weight.shape == (512, 512)
    assert mha(torch.randn(1, 3, 512), torch.randn(1, 4, 512), torch.randn(1, 4, 512)).shape == (
        1,
        3,
        512,
    )


def test_multi_head_attention_rejects_bad_configurations_and_inputs():
    with pytest.raises(ValueError, match="not divisible"):
        MultiHeadAttention(100, 8)
    mha = MultiHeadAttention(32, 4)
    good = torch.randn(2, 5, 32)
    with pytest.raises(ValueError, match="d_model=32"):
        mha(torch.randn(2, 5, 31), good, good)
    with pytest.raises(ValueError, match="same batch size and length"):
        mha(good, good, torch.randn(2, 4, 32))
    with pytest.raises(ValueError, match="batch sizes differ"):
        mha(torch.randn(3, 5, 32), good, good)
    with pytest.raises(ValueError, match="mask must be"):
        mha(good, good, good, torch.ones(5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="does not broadcast"):
        mha(good, good, good, torch.ones(2, 5, 4, dtype=torch.bool))


# ---------------------------------------------------------------- the chapter's measurements


def test_dot_product_variance_grows_like_d_k_and_scaling_removes_it():
    table = dot_product_spread([4, 64, 256], samples=20_000)
    measured = table["variance of q·k (measured)"] / table["d_k"]
    assert measured.between(0.93, 1.07).all()
    assert table["variance of q·k / sqrt(d_k)"].between(0.93, 1.07).all()


def test_unscaled_softmax_saturates_and_scaled_does_not():
    frame = softmax_saturation([4, 256], draws=500).set_index(["d_k", "scores"])
    assert frame.loc[(256, "unscaled"), "largest weight"] > 0.9
    assert frame.loc[(256, "scaled by 1/sqrt(d_k)"), "largest weight"] < 0.5
    assert (
        frame.loc[(256, "unscaled"), "gradient norm"]
        < 0.5 * frame.loc[(256, "scaled by 1/sqrt(d_k)"), "gradient norm"]
    )


# ---------------------------------------------------------------- the walk of section 1


def test_the_walk_step_by_step_agrees_with_equation_1():
    words, query, key, value = walk_example()
    output, weights = attention(query, key, value)
    for i, word in enumerate(words):
        steps = one_query_steps(words, query, key, value, i)
        assert steps["softmax weight"].tolist() == weights[i].numpy().round(2).tolist(), word
        totals = steps.filter(like="weight × v").sum().to_numpy()
        assert totals == pytest.approx(output[i].numpy(), abs=0.03), word


def test_the_walk_says_what_the_text_says():
    words, query, key, value = walk_example()
    steps = one_query_steps(words, query, key, value, words.index("chases"))
    assert steps["q·k"].tolist() == [0, 4, 0, 0, 2, 4]
    assert steps["÷ √4"].tolist() == [0, 2, 0, 0, 1, 2]
    assert steps["softmax weight"].tolist() == [0.05, 0.36, 0.05, 0.05, 0.13, 0.36]
    output, weights = attention(query, key, value)
    assert output[words.index("chases")].numpy().round(2).tolist() == [0.36, 0.36, 0.05, 0.13]
    assert weights[words.index("a")].numpy().round(4).tolist() == [0.1667] * 6  # looks for nothing


def test_the_second_head_attends_to_the_word_before():
    (_, first), (_, second) = walk_heads()
    assert second[1:].argmax(-1).tolist() == [0, 1, 2, 3, 4]
    # Not just the largest weight: nearly all of it, as the chapter says (0.96 against 0.01).
    assert second[1:].diagonal().min() > 0.95 and second[1:].sort(-1).values[:, -2].max() < 0.01
    assert not torch.equal(first.argmax(-1), second.argmax(-1))
    words, query, key, value = walk_example()
    assert torch.equal(first, attention(query, key, value)[1])


def test_the_walk_charts_are_plain_data():
    words, query, key, value = walk_example()
    steps = one_query_steps(words, query, key, value, 2)
    for chart in (
        vectors_chart(words, query, key, value),
        one_query_chart(steps, "chases"),
        all_queries_chart(words, query, key, value),
        heads_chart(words, walk_heads()),
    ):
        spec = chart.to_dict()
        assert spec["title"] and "hconcat" in spec


def test_the_heads_chart_labels_its_rows_with_the_words_given():
    words = walk_example()[0]
    spec = heads_chart(words, walk_heads()).to_dict()
    rows = {row["row"] for data in spec["datasets"].values() for row in data}
    assert rows == {f"{i + 1} {word}" for i, word in enumerate(words)}


def test_the_mask_and_saturation_charts_are_plain_data():
    target = torch.tensor([[5, 8, 3, 0, 0]])
    future, pads = subsequent_mask(5), padding_mask(target, 0)
    spec = decoder_masks_chart(future, pads, ["<s>", "a", "b", "<pad>", "<pad>"]).to_dict()
    # Cells allowed in each panel: the future's triangle, the 3 real keys in 5 rows, and both.
    allowed = [sum(row["allowed"] for row in data) for data in spec["datasets"].values()]
    assert sorted(allowed) == [12, 15, 15]
    spec = saturation_chart(softmax_saturation([4, 16], draws=50)).to_dict()
    assert spec["title"] and len(spec["vconcat"]) == 2
