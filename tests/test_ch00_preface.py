"""Chapter 0: the operation counts behind Table 1 follow the closed forms."""

import pytest
import torch

from annotated.ch00_preface import TABLE_1, count_operations, recurrent_layer


@pytest.mark.parametrize("d", [16, 64])
def test_counts_follow_table_1_closed_forms(d):
    frame = count_operations([4, 16, 64], d=d).set_index(["n", "layer"])
    for n in (4, 16, 64):
        rnn, attn = frame.loc[(n, "recurrent")], frame.loc[(n, "self-attention")]
        assert rnn["FLOPs"] == 4 * n * d * d  # input projection + recurrence, 2nd^2 each
        assert attn["FLOPs"] == 4 * n * n * d  # scores and weighted sum, 2n^2d each
        assert rnn["matrix products in sequence"] == n + 1
        assert attn["matrix products in sequence"] == 2


def test_recurrent_layer_is_the_textbook_recurrence():
    x, W, U = torch.randn(5, 3), torch.randn(3, 3), torch.randn(3, 3)
    h = torch.zeros(3)
    expected = []
    for t in range(5):
        h = torch.tanh(x[t] @ W + h @ U)
        expected.append(h)
    torch.testing.assert_close(recurrent_layer(x, W, U), torch.stack(expected))


def test_table_1_rows_are_the_papers():
    rows = TABLE_1.set_index("layer type")
    assert rows.loc["self-attention"].tolist() == ["O(n² · d)", "O(1)", "O(1)"]
    assert rows.loc["recurrent"].tolist() == ["O(n · d²)", "O(n)", "O(n)"]
    assert rows.loc["convolutional"].tolist() == ["O(k · n · d²)", "O(1)", "O(log_k(n))"]
    assert rows.loc["self-attention (restricted)"].tolist() == ["O(r · n · d)", "O(1)", "O(n/r)"]
