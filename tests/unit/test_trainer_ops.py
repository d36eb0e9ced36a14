"""The trainer's operational settings without sockets: torchrun / PyTorchJob environment,
backend choice, waiting for a peer with backoff, step metrics."""

from __future__ import annotations

import pytest

from graphfeed.common.errors import DeadlineExceeded, InvalidArgument, Unavailable
from graphfeed.trainer.config import TrainConfig
from graphfeed.trainer.connect import PeerTimeout, wait_for
from graphfeed.trainer.metrics import TrainerMetrics

DIST_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "JOB_COMPLETION_INDEX")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in DIST_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_torchrun_environment_gives_rank_world_size_and_gpu(clean_env: pytest.MonkeyPatch) -> None:
    assert (TrainConfig().rank, TrainConfig().world_size, TrainConfig().local_rank) == (0, 1, 0)
    clean_env.setenv("RANK", "3")
    clean_env.setenv("WORLD_SIZE", "4")
    clean_env.setenv("LOCAL_RANK", "1")
    clean_env.setenv("JOB_COMPLETION_INDEX", "2")  # RANK wins over the indexed Job's number
    cfg = TrainConfig(device="cuda")
    assert (cfg.rank, cfg.world_size, cfg.local_rank) == (3, 4, 1)
    assert cfg.torch_device == "cuda:1"  # plain cuda: this process's GPU
    assert TrainConfig(device="cuda:0").torch_device == "cuda:0"  # an explicit GPU is kept
    assert TrainConfig(rank=0, world_size=2).rank == 0  # flags win over the environment


def test_indexed_job_number_is_the_rank_without_torchrun(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("JOB_COMPLETION_INDEX", "5")
    assert TrainConfig().rank == 5


def test_backend_is_nccl_on_cuda_else_gloo_unless_given() -> None:
    assert TrainConfig(device="cuda").backend == "nccl"
    assert TrainConfig(device="cuda:1").backend == "nccl"
    assert TrainConfig(device="cpu").backend == "gloo"
    assert TrainConfig(device="cuda", dist_backend="gloo").backend == "gloo"


def test_wait_for_retries_an_unavailable_peer_until_it_answers(caplog: pytest.LogCaptureFixture) -> None:
    tries: list[float] = []

    def attempt(deadline_s: float) -> str:
        tries.append(deadline_s)
        if len(tries) < 3:
            raise Unavailable("connection refused") if len(tries) == 1 else DeadlineExceeded("slow")
        return "answer"

    assert wait_for("loader at x:1", attempt, 30.0, initial_backoff_s=0.01) == "answer"
    assert len(tries) == 3
    lines = [r.getMessage() for r in caplog.records if "waiting for loader at x:1" in r.getMessage()]
    assert len(lines) == 2 and "UNAVAILABLE connection refused" in lines[0]


def test_wait_for_gives_up_after_the_timeout_naming_the_last_error() -> None:
    def attempt(_deadline_s: float) -> None:
        raise Unavailable("connection refused")

    with pytest.raises(PeerTimeout, match=r"loader at x:1 did not answer within 0.2s: UNAVAILABLE connection refused"):
        wait_for("loader at x:1", attempt, 0.2, initial_backoff_s=0.01, max_backoff_s=0.05)


def test_wait_for_does_not_retry_a_bad_request() -> None:
    tries = []

    def attempt(_deadline_s: float) -> None:
        tries.append(1)
        raise InvalidArgument("fanouts must not be empty")

    with pytest.raises(InvalidArgument):
        wait_for("loader at x:1", attempt, 30.0)
    assert len(tries) == 1


def test_trainer_metrics_are_labelled_with_job_and_rank() -> None:
    m = TrainerMetrics.create("job-a", 2)
    m.record(wait_s=0.25, step_s=0.5)
    m.record(wait_s=0.25, step_s=0.01)
    labels = {"job": "job-a", "rank": "2"}
    assert m.registry.get_sample_value("graphfeed_trainer_minibatches_total", labels) == 2
    assert m.registry.get_sample_value("graphfeed_trainer_data_wait_seconds_total", labels) == 0.5
    assert m.registry.get_sample_value("graphfeed_trainer_step_seconds_count", labels) == 2
    assert m.registry.get_sample_value("graphfeed_trainer_step_seconds_bucket", {**labels, "le": "0.01"}) == 1


def test_progress_reports_rate_and_data_wait_share() -> None:
    import io

    from graphfeed.trainer.progress import Progress

    now = [0.0]
    out = io.StringIO()  # not a terminal: a line every log_every_s
    p = Progress(3, 10, stream=out, log_every_s=10.0, clock=lambda: now[0])
    for _ in range(4):
        now[0] += 5.0
        p.update(wait_s=2.5, loss=0.5)  # half of each 5 s step waiting for data
    lines = out.getvalue().splitlines()
    assert len(lines) == 2  # at 10 s and 20 s
    assert lines[-1] == "epoch 3 step 4/10     0.2 minibatches/s  data wait 50.0%  loss 0.5000"
    quiet = io.StringIO()
    q = Progress(0, 1, stream=quiet, enabled=False, clock=lambda: now[0])
    now[0] += 100
    q.update(0.0, 1.0)
    q.close()
    assert quiet.getvalue() == ""
