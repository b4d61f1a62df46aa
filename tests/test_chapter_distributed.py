"""grader/course/chapters/distributed.py: the code chapter 10 runs in two processes.

The chapter's test (tests/test_chapters.py) runs every task end to end and checks the figures;
here, what it relies on: DDPOptimizer's rule as the helper computes it, that a launch returns
one result per process, and that a failing task is reported with its traceback."""
from __future__ import annotations

import os
import tempfile

import pytest
import torch

from grader.course import chapters as ch


def test_expected_buckets_follow_ddpoptimizers_rule():
    # the head (1 KiB) then fc2 (1 MiB) fill the 1 MiB first bucket; then 2 MiB buckets:
    # fc1 + norm + the next block's fc2, then the rest
    assert ch.expected_ddp_buckets(256, 2, 2) == 3
    assert ch.expected_ddp_buckets(256, 4, 2) == 5
    assert ch.expected_ddp_buckets(64, 2, 25) == 1          # everything fits in the first bucket
    assert ch.expected_ddp_buckets(1024, 8, 25) > 1
    # the pieces' bytes: the first cut at 1 MiB whatever the cap (DDPOptimizer is handed only
    # bucket_bytes_cap), later ones at the cap
    head, fc2, fc1, norm = 4 * 257, 4 * (1024 * 256 + 256), 4 * (256 * 1024 + 1024), 4 * 512
    assert ch.ddp_optimizer_pieces(256, 2, 2) == [head + fc2, fc1 + norm + fc2, fc1 + norm]
    assert ch.ddp_optimizer_pieces(256, 2, 25)[0] == head + fc2
    assert sum(ch.ddp_optimizer_pieces(256, 3, 2)) == sum(p.numel() * 4 for p in ch.make_net(256, 3).parameters())


def test_net_checkpointed_or_not_computes_the_same():
    x = torch.randn(4, 16, requires_grad=True)
    plain, checkpointed = ch.make_net(16, 2), ch.make_net(16, 2, checkpoint=True)
    torch.testing.assert_close(checkpointed(x), plain(x))
    policy = ch.selective_checkpoint_saving((torch.ops.aten.addmm.default,))
    selective = ch.make_net(16, 2, checkpoint=True, context_fn=policy)
    selective(x).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_launch_returns_one_result_per_process_and_reports_a_failing_task(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))   # where launch keeps its results
    results = ch.launch(["seeds"], {"seeds": {"n": 256}}, backend="gloo", timeout=300)
    seeds = results["seeds"]
    assert len(seeds) == ch.WORLD_SIZE and all(r["backend"] == "gloo" for r in seeds)
    assert seeds[1]["differs_from_rank0"]["eager, same seed"] == 0
    assert seeds[1]["differs_from_rank0"]["eager, seed + rank"] > 0
    with pytest.raises(RuntimeError, match="unexpected keyword argument 'bogus'"):
        ch.launch(["seeds"], {"seeds": {"bogus": 1}}, backend="gloo", timeout=300)
    with pytest.raises(ValueError, match="unknown tasks"):
        ch.launch(["nothing"])
    assert os.listdir(tmp_path) == []     # a failed run leaves nothing behind either


def test_generated_code_and_settings():
    code = ch.generated_code(lambda t: torch.sin(t) + 1, torch.randn(8))
    assert "def call" in code
    assert ch.dynamo_setting("optimize_ddp") in (True, False, "ddp_optimizer", "no_optimization",
                                                 "python_reducer",
                                                 "python_reducer_without_compiled_forward")
    assert ch.dynamo_setting("no_such_setting") is None
    assert ch.fully_shard_function().__name__ == "fully_shard"
