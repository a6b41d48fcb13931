"""What `cudagent train` runs: the verl command line of a stage, the checks made before launching it, and the run
directory it writes (metrics.jsonl through verl's file logger, command.json).

    warmup, critic, agentic   python -m verl.trainer.main_ppo --config-path cudagent/train/config --config-name STAGE
    rft                       torchrun --standalone --nproc_per_node N -m verl.trainer.sft_trainer ... rft

then the data, the model, the evaluator URLs and the agent-loop registry as overrides, `smoke.yaml`'s values with
`--smoke`, and the user's `-o key=value` last (they win). With `--ray-address` the same command goes through
`ray job submit`. Before anything launches (and in `--dry-run`), `check_config` composes the stage's config as
verl will and runs verl's own `validate_config` on it (verl_config.py: nothing here imports verl).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from cudagent.errors import CudagentError, EnvironmentProblem

STAGES = ("warmup", "rft", "critic", "agentic")
CONFIG_DIR = Path(__file__).resolve().parent / "config"
AGENT_LOOPS = Path(__file__).resolve().parent / "agent_loops.yaml"
RL_COLUMNS = ("prompt", "agent_name", "extra_info")
RFT_FIELDS = ("prompt_ids", "response_ids", "response_mask")
SECRET_ENV = ("CUDAGENT_EVALUATOR_TOKEN",)


@dataclass
class TrainRequest:
    stage: str
    data: Path
    model: str
    out: Path
    evaluator_urls: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    smoke: bool = False
    ray_address: str | None = None
    gpus: int = 8  # per node; rft's torchrun processes
    resume_from: Path | None = None
    submission_id: str = ""  # the Ray job's id (`ray job submit --submission-id`), so that it can be stopped

    def __post_init__(self):
        if self.stage not in STAGES:
            raise CudagentError(f"unknown stage {self.stage!r}; use one of {', '.join(STAGES)}")
        for o in self.overrides:
            if "=" not in o or o.startswith("="):
                raise CudagentError(f"-o {o!r} is not key=value (e.g. -o trainer.total_training_steps=10)")
        if self.gpus < 1:
            raise CudagentError(f"--gpus {self.gpus}: a stage needs at least one GPU per node")
        if self.resume_from is not None and not Path(self.resume_from).expanduser().is_dir():
            raise CudagentError(f"--resume-from {self.resume_from}: no such checkpoint directory")
        if self.ray_address and not self.submission_id:
            self.submission_id = f"cudagent-{self.stage}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def smoke_overrides() -> list[str]:
    """smoke.yaml as key=value overrides (it layers over any stage)."""
    import yaml

    def flat(prefix: str, node) -> list[str]:
        if isinstance(node, dict):
            return [o for k, v in node.items() for o in flat(f"{prefix}{k}.", v)]
        return [f"{prefix[:-1]}={json.dumps(node) if isinstance(node, (list, bool)) or node is None else node}"]

    return flat("", yaml.safe_load((CONFIG_DIR / "smoke.yaml").read_text()) or {})


def stage_overrides(req: TrainRequest) -> list[str]:
    """The overrides cudagent adds for the stage, before the user's."""
    data = str(Path(req.data).resolve())
    checkpoints = str((req.out / "checkpoints").resolve())
    if req.stage == "rft":
        extra = [f"data.train_files={data}", f"model.path={req.model}", f"trainer.default_local_dir={checkpoints}"]
    else:
        urls = ",".join(json.dumps(u) for u in req.evaluator_urls)
        extra = [
            f"data.train_files={data}",
            f"actor_rollout_ref.model.path={req.model}",
            f"critic.model.path={req.model}",
            f"cudagent.evaluator_urls=[{urls}]",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={AGENT_LOOPS}",
            f"trainer.default_local_dir={checkpoints}",
            f"trainer.n_gpus_per_node={req.gpus}",
        ]
        if req.resume_from is not None:
            extra += ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={checkpoint_step(req.resume_from)}"]
    if req.smoke:
        rft_keys = ("trainer.total_training_steps", "trainer.save_freq", "data.train_batch_size")  # the SFT config's
        extra += [o for o in smoke_overrides() if req.stage != "rft" or o.startswith(rft_keys)]
    return extra


def checkpoint_step(path: Path, what: str = "--resume-from") -> Path:
    """The `global_step_N` folder verl resumes from (it refuses any other name): `path` itself, or the one its
    tracker file (`latest_checkpointed_iteration.txt`, which verl writes beside its checkpoints) names, or the
    highest-numbered one inside it. `what`: how the error names the path."""
    path = Path(path).expanduser().resolve()
    if path.name.startswith("global_step_"):
        return path
    tracker = path / "latest_checkpointed_iteration.txt"
    if tracker.is_file():
        named = path / f"global_step_{tracker.read_text().strip()}"
        if named.is_dir():
            return named
    steps = [p for p in path.glob("global_step_*") if p.is_dir() and p.name.removeprefix("global_step_").isdigit()]
    if not steps:
        hint = " (for the agentic stage: the critic stage's, e.g. train-runs/critic/checkpoints)"
        raise CudagentError(
            f"{what} {path}: no global_step_N checkpoint in it; give a stage's run directory or checkpoints folder"
            + (hint if what == "--resume-from" else "")
        )
    return max(steps, key=lambda p: int(p.name.removeprefix("global_step_")))


def command(req: TrainRequest) -> list[str]:
    """The argv that runs the stage (through `ray job submit` with a Ray address)."""
    config = ["--config-path", str(CONFIG_DIR), "--config-name", req.stage]
    if req.stage == "rft":
        argv = ["torchrun", "--standalone", f"--nproc_per_node={req.gpus}", "-m", "verl.trainer.sft_trainer", *config]
    else:
        argv = [sys.executable if not req.ray_address else "python", "-m", "verl.trainer.main_ppo", *config]
    argv += stage_overrides(req) + list(req.overrides)
    if req.ray_address:  # the job's environment, token included, from a file only the user can read (runtime_env)
        argv = ["ray", "job", "submit", "--address", req.ray_address, "--submission-id", req.submission_id,
                "--runtime-env", str(runtime_env_path(req)), "--", *argv]  # fmt: skip
    return argv


def stop_command(req: TrainRequest) -> list[str] | None:
    """What stops the stage where it runs, when that is not this machine's process group: `ray job stop`."""
    if not req.ray_address:
        return None
    return ["ray", "job", "stop", "--address", req.ray_address, req.submission_id]


def runtime_env_path(req: TrainRequest) -> Path:
    return (req.out / "runtime-env.yaml").resolve()


def write_runtime_env(req: TrainRequest, environ: dict) -> Path:
    """The Ray job's runtime_env: where the run writes, and the evaluator's token (CUDAGENT_EVALUATOR_TOKEN) that the
    agent loops on the cluster's workers need. A file of mode 0600, so that the token appears in no command line,
    no printed command and no command.json."""
    import yaml

    env_vars = {**run_files(req), **{k: environ[k] for k in SECRET_ENV if environ.get(k)}}
    path = runtime_env_path(req)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump({"env_vars": env_vars}, f)
    os.chmod(path, 0o600)
    return path


def run_files(req: TrainRequest) -> dict:
    """Where the run's processes write: verl's file logger the steps, the agent loops one line per episode."""
    return {
        "VERL_FILE_LOGGER_PATH": str((req.out / "metrics.jsonl").resolve()),
        "CUDAGENT_TRAIN_ROLLOUTS": str((req.out / "rollouts.jsonl").resolve()),
    }


def environment(req: TrainRequest, environ: dict) -> dict:
    """The environment the stage runs with (locally; through Ray, the job's runtime env carries the same)."""
    return {**environ, **run_files(req)}


def printable(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


# ----- checks before launching ----------------------------------------------------------------------------------------


def preflight(req: TrainRequest, environ: dict, *, check_verl: bool = True) -> None:
    """Everything checkable here, each failure one sentence (CudagentError: exit 2; EnvironmentProblem: exit 3)."""
    check_data(req.stage, req.data)
    check_model(req.model)
    if importlib.util.find_spec("verl") is not None:
        check_config(req)  # in a dry run too: a config verl would refuse at launch is refused here
    elif check_verl:
        raise EnvironmentProblem('verl is not installed here; pip install "cudagent[train]" (verl==0.9.1)')
    if req.stage != "rft":
        check_evaluator(req, environ)


def check_model(model: str) -> None:
    """A Hugging Face model folder; a previous stage's run directory is named as such, with the folder to give."""
    path = Path(model).expanduser()
    if not path.is_dir():
        raise CudagentError(f"--model {model}: no such directory; give a local Hugging Face model directory")
    if (path / "config.json").is_file():
        return
    if (path / "command.json").is_file() or (path / "checkpoints").is_dir():
        raise CudagentError(
            f"--model {model} is a training run, not a model: give {path / 'hf'} (a finished stage writes it; "
            f"cudagent train export {model} writes it from the latest checkpoint)"
        )
    raise CudagentError(f"--model {model} has no config.json; give a local Hugging Face model directory")


def check_data(stage: str, data: Path) -> None:
    """The stage's dataset is readable and has what the stage reads (one sentence when it has not)."""
    path = Path(data).expanduser()
    if not path.is_file():
        raise CudagentError(f"--data {data}: no such file")
    if stage == "rft":
        from cudagent.train.rft import read_episodes

        try:
            rows = read_episodes(path)
        except (ValueError, UnicodeDecodeError) as exc:
            raise CudagentError(f"--data {data} is not JSON lines of episodes ({exc})") from None
        missing = sorted({f for r in rows[:50] for f in RFT_FIELDS if f not in r})
        if not rows or missing:
            raise CudagentError(
                f"--data {data} has no episodes with {', '.join(RFT_FIELDS)}"
                + (f" (missing {', '.join(missing)})" if missing else "")
                + "; make it with cudagent train rft-collect"
            )
        return
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise EnvironmentProblem('reading --data needs pyarrow: pip install "cudagent[train]"') from None
    try:
        columns = pq.read_schema(path).names
    except Exception as exc:  # noqa: BLE001  (pyarrow raises several kinds for a file that is not parquet)
        raise CudagentError(f"--data {data} is not a parquet file ({type(exc).__name__})") from None
    missing = [c for c in RL_COLUMNS if c not in columns]
    if missing:
        raise CudagentError(
            f"--data {data} lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)} (it has "
            f"{', '.join(columns)}); "
            "make it with cudagent data export --format verl"
        )


def read_rows(path: Path) -> list[dict]:
    """The `extra_info` of each row of a verl dataset (parquet), checked for its columns."""
    check_data("agentic", path)
    import pyarrow.parquet as pq

    return [dict(r) for r in pq.read_table(Path(path).expanduser(), columns=["extra_info"]).column(0).to_pylist()]


def check_evaluator(req: TrainRequest, environ: dict) -> None:
    import asyncio

    from cudagent.evaluator.where import evaluators

    if not req.evaluator_urls:
        raise CudagentError("give --evaluator URL (a cudagent serve host); rollouts are scored there")
    asyncio.run(evaluators(req.evaluator_urls, environ=environ).check())  # nothing answering, a wrong token: at once


# ----- the run directory --------------------------------------------------------------------------------------------


def composed(req: TrainRequest):
    """The stage's config as verl's entry point composes it (Hydra: the stage file, cudagent's overrides, the
    user's); a key or value Hydra refuses is one sentence."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
            return compose(config_name=req.stage, overrides=stage_overrides(req) + list(req.overrides))
    except (HydraException, OmegaConfBaseException) as exc:
        raise CudagentError(f"the {req.stage} stage's config does not compose: {_first_line(exc)}") from None


def check_config(req: TrainRequest) -> None:
    """Compose the stage's config and run verl's own checks on it (RL stages: `validate_config`, as main_ppo does
    at launch, with the reference policy and the critic it would use). Needs verl; a refusal is one sentence."""
    config = composed(req)
    check_sequence_room(req, config)
    if req.stage == "rft":
        return
    from cudagent.train.verl_config import validate

    try:
        validate(config)
    except Exception as exc:  # noqa: BLE001  (verl raises assertions, ValueErrors and Hydra's instantiation errors)
        raise CudagentError(f"verl refuses the {req.stage} stage's config: {_first_line(exc)}") from None


def check_sequence_room(req: TrainRequest, config) -> None:
    """Each pass that packs sequences into micro-batches by a token budget (dynamic batching) holds the stage's
    longest sequence: budget per GPU times the Ulysses sequence-parallel size at least prompt plus response. verl
    asserts this only when the first long episode reaches the pass, after a step's rollouts; and each parallel
    group must divide the GPUs."""
    if req.stage == "rft":
        longest, gpus = int(config.data.max_length), req.gpus
        sp = int(config.engine.ulysses_sequence_parallel_size)
        passes = [("data.max_token_len_per_gpu", config.data.use_dynamic_bsz, config.data.max_token_len_per_gpu, sp)]
    else:
        longest = int(config.data.max_prompt_length) + int(config.data.max_response_length)
        gpus = int(config.trainer.n_gpus_per_node) * int(config.trainer.nnodes)
        actor, ref, rollout, critic = (config.actor_rollout_ref.actor, config.actor_rollout_ref.ref,
                                       config.actor_rollout_ref.rollout, config.critic)  # fmt: skip
        actor_sp, ref_sp = (
            int(actor.fsdp_config.ulysses_sequence_parallel_size),
            int(ref.fsdp_config.ulysses_sequence_parallel_size),
        )
        critic_sp = int(critic.fsdp.ulysses_sequence_parallel_size)
        passes = [
            ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", actor.use_dynamic_bsz,
             actor.ppo_max_token_len_per_gpu, actor_sp),
            ("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", rollout.log_prob_use_dynamic_bsz,
             rollout.log_prob_max_token_len_per_gpu, actor_sp),
            ("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu", ref.log_prob_use_dynamic_bsz,
             ref.log_prob_max_token_len_per_gpu, ref_sp),
            ("critic.ppo_max_token_len_per_gpu", critic.use_dynamic_bsz, critic.ppo_max_token_len_per_gpu, critic_sp),
            ("critic.forward_max_token_len_per_gpu", critic.use_dynamic_bsz, critic.forward_max_token_len_per_gpu,
             critic_sp),
        ]  # fmt: skip
    for key, dynamic, budget, sp in passes:
        if gpus % sp:
            raise CudagentError(
                f"the {req.stage} stage splits each sequence over {sp} GPUs (ulysses_sequence_parallel_size), which "
                f"does not divide its {gpus} GPUs; change --gpus or -o that size"
            )
        if dynamic and int(budget) * sp < longest:
            raise CudagentError(
                f"the {req.stage} stage's {key} is {budget} tokens x {sp} GPUs of sequence parallelism = "
                f"{int(budget) * sp}, less than its longest sequence ({longest} tokens): -o {key}="
                f"{-(-longest // sp)} or more"
            )


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and not ln.startswith("full_key")]
    text = " ".join(lines[:2]) if lines else type(exc).__name__
    return text[:600]


def episodes_per_step(req: TrainRequest) -> int | None:
    """The composed config's batch times samples per prompt (RL stages; None without Hydra or for rft)."""
    if req.stage == "rft" or importlib.util.find_spec("hydra") is None:
        return None
    cfg = composed(req)
    return int(cfg.data.train_batch_size) * int(cfg.actor_rollout_ref.rollout.n)


def write_run_record(req: TrainRequest, argv: list[str]) -> None:
    req.out.mkdir(parents=True, exist_ok=True)
    record = {"stage": req.stage, "data": str(req.data), "model": req.model, "evaluator_urls": req.evaluator_urls,
              "smoke": req.smoke, "ray_address": req.ray_address, "argv": argv,
              "episodes_per_step": episodes_per_step(req)}  # fmt: skip
    (req.out / "command.json").write_text(json.dumps(record, indent=2) + "\n")
