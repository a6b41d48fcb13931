"""`cudagent train` on the CPU with verl 0.9.1 installed: the adapter driven through verl's own AgentLoopWorker (called
directly, not as a Ray actor) with a tiny local model's tokenizer and a scripted token server, against a real
`cudagent serve` on localhost scoring C++ tasks; the stage configs composed by Hydra; GAE from verl's core_algos on a
multi-turn mask; the RFT dataset against verl's MultiTurnSFTDataset; bad input."""

from __future__ import annotations

import asyncio
import json
import math
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

verl = pytest.importorskip("verl")

from tests.agent.completions_server import CompletionsHandler  # noqa: E402
from tests.agent.episodes import KERNEL, MODEL_NEW, TASK  # noqa: E402
from tests.serve.service_proc import TOKEN  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A two-layer Llama with SmolLM2's tokenizer and chat template, saved as a Hugging Face directory."""
    from tests.train.checkpoints import tiny_llama

    return tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def service(cpu_service):
    return cpu_service  # the session's (conftest.py)


def _action(tool: str, **arguments) -> str:
    return f"Next step.\n```action\n{json.dumps({'tool': tool, 'arguments': arguments})}\n```"


SOLVE = [
    _action("write_file", path="kernels/axpby_cpu.cpp", content=KERNEL),
    _action("write_file", path="model_new.py", content=MODEL_NEW),
    _action("verify"),
    _action("finish", summary="axpby in one OpenMP pass"),
]
# never finishes: it ends on a limit, so one batch holds episodes that ended for different reasons
BROKEN = [
    _action("write_file", path="model_new.py", content="def broken(:\n"),
    _action("verify"),
    _action("bash", command="ls"),
]


class ScriptedTokenServer:
    """verl's LLMServerClient as the adapter sees it: generate(request_id, *, prompt_ids, sampling_params) returning
    verl's TokenOutput. Replies are chosen by the task in the prompt, tokenized with the real tokenizer, plus EOS."""

    def __init__(self, tokenizer):
        self.tokenizer, self.turn, self.requests = tokenizer, {}, []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.requests.append((request_id, len(prompt_ids), dict(sampling_params)))
        prompt = self.tokenizer.decode(prompt_ids[:4000])
        script = BROKEN if "broken_axpby" in prompt else SOLVE
        i = self.turn.get(request_id, 0)
        self.turn[request_id] = i + 1
        ids = self.tokenizer(script[min(i, len(script) - 1)], add_special_tokens=False)["input_ids"]
        ids = ids[: int(sampling_params["max_tokens"]) - 1] + [end_of_turn(self.tokenizer)]
        # as verl's vLLM and SGLang servers: log-probabilities only for a request that asks for them
        log_probs = [-0.5] * len(ids) if sampling_params.get("logprobs") else None
        return TokenOutput(token_ids=ids, log_probs=log_probs, stop_reason="completed")


def _stage_config(stage: str, overrides: list[str]):
    from hydra import compose, initialize_config_dir

    from cudagent.train.command import CONFIG_DIR

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name=stage, overrides=overrides)


@pytest.mark.slow
def test_the_adapter_runs_scored_episodes_inside_verls_agent_loop_worker(tiny_model, service, monkeypatch, tmp_path):
    import numpy as np
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto

    from cudagent.train.command import AGENT_LOOPS

    monkeypatch.setenv("CUDAGENT_EVALUATOR_TOKEN", TOKEN)
    monkeypatch.setenv("CUDAGENT_TRAIN_ROLLOUTS", str(tmp_path / "rollouts.jsonl"))
    monkeypatch.chdir(tmp_path)
    config = _stage_config("agentic", [
        "data.train_files=unused.parquet", f"actor_rollout_ref.model.path={tiny_model}",
        f"critic.model.path={tiny_model}", f'cudagent.evaluator_urls=["{service.url}"]',
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={AGENT_LOOPS}", "cudagent.max_turns=6",
        "data.max_prompt_length=8192", "data.max_response_length=8192", "trainer.n_gpus_per_node=1",
    ])  # fmt: skip
    from cudagent.agent.backends import load_tokenizer

    server = ScriptedTokenServer(load_tokenizer(str(tiny_model)))
    worker = AgentLoopWorker(config, server)
    rows = [{"task_id": "axpby_small", "task_source": TASK},
            {"task_id": "broken_axpby", "task_source": TASK}]  # fmt: skip
    batch = DataProto.from_dict(
        non_tensors={
            "raw_prompt": _objects([[{"role": "user", "content": r["task_id"]}] for r in rows]),
            "agent_name": np.array(["cudagent_agent"] * 2, dtype=object),
            "extra_info": np.array(rows, dtype=object),
            "index": np.array([0, 1]),
        }
    )
    out = asyncio.run(worker.generate_sequences(batch))

    responses, mask = out.batch["responses"], out.batch["response_mask"]
    attention = out.batch["attention_mask"][:, out.batch["prompts"].shape[1] :]
    scores, logprobs = out.batch["rm_scores"], out.batch["rollout_log_probs"]
    info = out.non_tensor_batch
    tiers = [int(t) for t in info["tier"]]
    assert tiers[0] >= 1 and tiers[1] == -1, dict(info)  # solved (correct, timed on this CPU) / broken
    for i in range(2):
        length = int(attention[i].sum())
        last = length - 1
        assert scores[i].nonzero().flatten().tolist() == [last]  # the reward on the last response token only...
        assert float(scores[i, last]) == float(tiers[i]) == float(info["reward"][i])
        assert int(mask[i, last]) == 1  # ...which the model sampled
        assert int(responses[i, last]) == server_eos(tiny_model)
        sampled = mask[i, :length].bool()
        assert (~sampled).any() and sampled.any()  # observations in between, masked
        assert set(logprobs[i, :length][sampled].tolist()) == {-0.5}
        assert set(logprobs[i, :length][~sampled].tolist()) == {0.0}
        assert mask[i, length:].sum() == 0
    assert int(info["__num_turns__"][0]) == 2 * 4 and info["end_reason"][0] == "finished"
    assert float(info["tool_validity"][0]) == 1.0 and int(info["ended_finished"][0]) == 1
    ended = info["end_reason"][1]  # the other episode ended on a limit: the batch still has one set of keys
    assert ended != "finished" and int(info["ended_finished"][1]) == 0 and int(info[f"ended_{ended}"][1]) == 1
    # one record per episode for `train status` and the stop rule
    records = sorted((json.loads(x) for x in (tmp_path / "rollouts.jsonl").read_text().splitlines()),
                     key=lambda r: r["task"])  # fmt: skip
    assert [(r["task"], r["tier"], r["reward"]) for r in records] == [
        ("axpby_small", tiers[0], float(tiers[0])), ("broken_axpby", -1, -1.0)]  # fmt: skip
    assert all(abs(r["min_token_prob"] - math.exp(-0.5)) < 1e-9 for r in records)
    # every request carried the trainer's sampling parameters and a per-turn cap on the reply
    assert all(p["max_tokens"] <= 4096 and "temperature" in p and p["logprobs"] for _, _, p in server.requests)


class _Replies:
    """A token backend that answers each request with the next scripted reply (text, and whether it ends on the
    end-of-turn token), log-probabilities only when asked, and records what it was asked."""

    def __init__(self, tokenizer, replies: list[tuple[str, bool]]):
        self.tokenizer, self.replies, self.requests = tokenizer, list(replies), []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.requests.append((self.tokenizer.decode(prompt_ids), dict(sampling_params)))
        text, stops = self.replies.pop(0)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + ([end_of_turn(self.tokenizer)] * stops)
        log_probs = [-0.5] * len(ids) if sampling_params.get("logprobs") else None
        return TokenOutput(token_ids=ids, log_probs=log_probs, stop_reason="completed" if stops else "length")


@pytest.mark.slow
def test_the_warmup_asks_for_one_whole_file_with_the_whole_response_length_and_scores_that_file(
    tiny_model, service, monkeypatch
):
    """The warm-up stage's episode: its own prompt (no tools, one complete model_new.py in KernelBench's format), one
    request for the stage's whole response length, and the reward of the file in the reply; a reply without one, or
    cut off before its block closes, earns -1."""
    from cudagent.agent.backends import load_tokenizer
    from cudagent.evaluator.where import evaluators
    from cudagent.train.rollout import rollout

    monkeypatch.setenv("CUDAGENT_EVALUATOR_TOKEN", TOKEN)
    config = _stage_config("warmup", ["data.train_files=x", f"actor_rollout_ref.model.path={tiny_model}"])
    from cudagent.train.rollout import RolloutSettings

    settings = RolloutSettings.from_config(
        {**{k: v for k, v in config.cudagent.items() if k != "evaluator_urls"},
         "prompt_tokens": config.data.max_prompt_length,
         "response_tokens": config.actor_rollout_ref.rollout.response_length}
    )  # fmt: skip
    assert settings.single_turn and settings.response_tokens == 8192 > settings.reply_tokens
    inline = (ROOT / "tests/adversarial/cases/control_inline_cpu/model_new.py").read_text()
    backend = _Replies(load_tokenizer(str(tiny_model)), [
        (f"One pass over both vectors.\n```python\n{inline}```\n", True),
        ("I would fuse the multiply and the add.", True),
        ("```python\nimport torch\nclass ModelNew(torch.nn.Module):\n    pass\n", False),
    ])  # fmt: skip
    pool, row = evaluators([service.url]), {"task_id": "axpby_small", "task_source": TASK}

    async def three():
        return [await rollout(row, backend, backend.tokenizer, settings, pool, {"logprobs": True}) for _ in range(3)]

    solved, prose, cut = asyncio.run(three())
    prompt, params = backend.requests[0]
    assert "model_new.py" in prompt and "load_inline" in prompt and "class Model(nn.Module)" in prompt
    assert "write_file" not in prompt and "```action" not in prompt  # not the multi-turn prompt with its tools
    assert all(p["max_tokens"] == 8192 for _, p in backend.requests)  # the whole response length, every time
    assert solved.tier >= 1 and solved.reward == float(solved.tier) and solved.end_reason == "finished"
    assert solved.metrics["correct"] == 1 and solved.num_turns == 1 and solved.metrics["ended_finished"] == 1
    assert (prose.reward, prose.end_reason, prose.metrics["tool_validity"]) == (-1.0, "format_errors", 0.0)
    assert (cut.reward, cut.end_reason) == (-1.0, "tokens")
    for shot in (solved, prose, cut):  # the ledger: the opening, then the reply alone, every token sampled
        assert shot.ledger.response_mask == [1] * len(shot.ledger.response_ids)
        assert set(shot.ledger.response_logprobs) == {-0.5}
    assert set(solved.metrics) == set(prose.metrics)  # one set of keys, as verl stacks them over a batch


@pytest.mark.slow
def test_the_adapter_runs_on_verls_default_trainer_path_through_transfer_queue(tiny_model, service, tmp_path):
    """verl 0.9.1's default trainer (trainer.use_v1, main_ppo.py's TaskRunnerV1): rows from verl's own dataset and
    collate, the prompts registered in TransferQueue, AgentLoopWorkerTQ as a Ray actor on a local cluster, and the
    finished episodes read back from TransferQueue as the trainer reads them. The token server returns
    log-probabilities only when a request asks (as verl's vLLM and SGLang servers do)."""
    import time
    import uuid

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import ray
    import transfer_queue as tq
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
    from verl.utils import tensordict_utils as tu
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    from cudagent.agent.backends import load_tokenizer
    from cudagent.train.command import AGENT_LOOPS

    rows = [{"prompt": [{"role": "user", "content": name}], "agent_name": "cudagent_agent",
             "extra_info": {"task_id": name, "task_source": TASK}}
            for name in ("axpby_small", "broken_axpby")]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    config = _stage_config("agentic", [
        f"data.train_files={tmp_path / 'train.parquet'}", f"actor_rollout_ref.model.path={tiny_model}",
        f"critic.model.path={tiny_model}", f'cudagent.evaluator_urls=["{service.url}"]',
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={AGENT_LOOPS}", "cudagent.max_turns=6",
        "data.max_prompt_length=8192", "data.max_response_length=8192", "trainer.n_gpus_per_node=1",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    ])  # fmt: skip
    assert config.trainer.use_v1  # the path main_ppo runs unless told otherwise
    tokenizer = load_tokenizer(str(tiny_model))
    batch_dict = collate_fn(list(RLHFDataset(str(tmp_path / "train.parquet"), tokenizer, config.data)))
    batch_dict["uid"] = np.array([str(uuid.uuid4()) for _ in range(2)], dtype=object)  # as trainer_base.py:1476
    batch = tu.get_tensordict(batch_dict)
    tu.assign_non_tensor_data(batch, "global_steps", 1)
    uids = list(batch["uid"])
    env = {"CUDAGENT_EVALUATOR_TOKEN": TOKEN, "CUDAGENT_TRAIN_ROLLOUTS": str(tmp_path / "rollouts.jsonl"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    ray.init(num_cpus=4, include_dashboard=False, object_store_memory=200 << 20, runtime_env={"env_vars": env})
    try:
        config.transfer_queue.enable = True  # as TaskRunnerV1.run, then tq.init on its config
        tq.init(config.transfer_queue)
        tq.kv_batch_put(keys=uids, partition_id="train",
                        tags=[{"is_prompt": True, "status": "pending", "global_steps": 1}] * 2)  # fmt: skip
        worker = AgentLoopWorkerTQ.remote(config, ScriptedTokenServer(tokenizer))
        ray.get(worker.generate_sequences.remote(batch))  # returns at once: the episodes run on in the actor
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            status = {u: tq.kv_list("train")["train"][u].get("status") for u in uids}
            if all(s in ("finished", "failure") for s in status.values()):
                break
            time.sleep(0.5)
        assert set(status.values()) == {"finished"}, status
        out = tq.kv_batch_get(keys=[f"{u}_0_0" for u in uids], partition_id="train")
        results = {}
        for i in range(2):
            extra = out["extra_fields"][i]
            info = extra["reward_extra_info"]
            scores, responses = out["rm_scores"][i], out["responses"][i]
            mask, logprobs = out["response_mask"][i], out["rollout_log_probs"][i]
            assert scores.nonzero().flatten().tolist() == [len(responses) - 1]  # the reward on the last token
            assert float(scores[-1]) == float(info["tier"]) == float(info["reward"])
            assert int(mask[-1]) == 1 and int(responses[-1]) == end_of_turn(tokenizer)
            assert set(logprobs[mask.bool()].tolist()) == {-0.5} and (~mask.bool()).any()
            results[out["extra_info"][i]["task_id"]] = info
        solved, broken = results["axpby_small"], results["broken_axpby"]
        assert solved["tier"] >= 1 and solved["end_reason"] == "finished" and solved["ended_finished"] == 1
        assert broken["tier"] == -1 and broken["end_reason"] != "finished"  # ended on a limit: mixed end reasons
        assert broken[f"ended_{broken['end_reason']}"] == 1 and set(solved) == set(broken)
        records = [json.loads(x) for x in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
        assert sorted(r["task"] for r in records) == ["axpby_small", "broken_axpby"]
    finally:
        tq.close()
        ray.shutdown()


def verl_steps(tasks: int, batch: int, epochs: int, total_steps: int, critic_warmup: int, start: int = 0):
    """The steps verl 0.9.1's trainer runs and those that update the actor, by its loop's own conditions
    (verl/trainer/ppo/v1/trainer_base.py: steps_per_epoch 765, the while 467, the epoch after each step 522, the
    actor's update 608, a resume's step 876)."""
    steps_per_epoch = tasks // batch
    global_steps, ran = start, []
    current_epoch = global_steps // steps_per_epoch
    global_steps += 1
    while current_epoch < epochs and global_steps <= total_steps:
        ran.append(global_steps)
        global_steps += 1
        current_epoch = (global_steps - 1) // steps_per_epoch
    return ran, [s for s in ran if critic_warmup <= s]


def test_the_stages_run_their_steps_and_the_critic_stage_never_moves_the_actor():
    """The training page's sizes (6,000 tasks; batch 1,024 for the RL stages): each stage runs every step it is set to,
    from scratch and after a resume; the critic stage updates the actor at none of them."""
    from cudagent.train.command import smoke_overrides

    for stage in ("warmup", "critic", "agentic"):
        for smoke in (False, True):
            base = ["data.train_files=x", "actor_rollout_ref.model.path=m"]
            config = _stage_config(stage, base + (smoke_overrides() if smoke else []))
            t = config.trainer
            batch = int(config.data.train_batch_size)
            # verl's total (trainer_base.py:768-770): the stage's steps, else its epochs over the data
            total = int(t.total_training_steps or (6000 // batch) * int(t.total_epochs))
            ran, actor = verl_steps(6000, batch, int(t.total_epochs), total, int(t.critic_warmup))
            assert ran == list(range(1, total + 1)), (stage, smoke, len(ran), total)
            assert actor == ([] if stage == "critic" else ran), (stage, smoke)
    # the agentic stage resumed from the critic stage's last checkpoint (step 50) runs on to its own last step
    config = _stage_config("agentic", ["data.train_files=x", "actor_rollout_ref.model.path=m"])
    ran, actor = verl_steps(6000, 1024, int(config.trainer.total_epochs), 200, 0, start=50)
    assert ran == list(range(51, 201)) and actor == ran


def test_resume_from_a_checkpoints_folder_names_its_latest_step(tmp_path):
    from cudagent.errors import CudagentError
    from cudagent.train.command import checkpoint_step

    folder = tmp_path / "critic" / "checkpoints"
    for step in (10, 40, 50):
        (folder / f"global_step_{step}").mkdir(parents=True)
    assert checkpoint_step(folder) == folder / "global_step_50"  # no tracker: the highest step
    (folder / "latest_checkpointed_iteration.txt").write_text("40")
    assert checkpoint_step(folder) == folder / "global_step_40"  # verl's own tracker wins
    assert checkpoint_step(folder / "global_step_10") == folder / "global_step_10"
    with pytest.raises(CudagentError, match="no global_step_N checkpoint"):
        checkpoint_step(tmp_path)


def test_every_way_an_episode_ends_is_a_known_end_reason():
    """The per-reason metrics (ended_<reason>, one key per reason in every row) need the whole list."""
    import inspect
    import re

    from cudagent.agent import chat_driver, token_driver
    from cudagent.agent.episode import END_REASONS, Episode

    found = set(re.findall(r'return "(\w+)"', inspect.getsource(Episode.stop_reason)))
    for driver in (chat_driver, token_driver):
        source = inspect.getsource(driver)
        for pattern in (r'reason(?:, error)? = "(\w+)"', r'return "(\w+)"', r'# or "(\w+)"'):
            found |= set(re.findall(pattern, source))
    assert found >= {"finished", "max_turns", "context", "policy_error", "interrupted", "terminated"}
    assert found <= set(END_REASONS), found - set(END_REASONS)


def _objects(items: list):
    import numpy as np

    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array


def server_eos(model_dir: Path) -> int:
    from cudagent.agent.backends import load_tokenizer

    return end_of_turn(load_tokenizer(str(model_dir)))


def end_of_turn(tok) -> int:
    """The token SmolLM2's chat template ends an assistant turn with (what a served model stops on)."""
    return tok.convert_tokens_to_ids("<|im_end|>")


@pytest.mark.slow  # more than a few seconds (the inner loop leaves it out)
@pytest.mark.parametrize("stage", ["warmup", "critic", "agentic", "rft"])
def test_each_stage_config_composes_and_its_dry_run_is_the_readme_command(stage, tiny_model, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / ("kept.jsonl" if stage == "rft" else "train.parquet")
    if stage == "rft":
        data.write_text(json.dumps({"prompt_ids": [1], "response_ids": [2], "response_mask": [1], "tier": 3,
                                    "tool_validity": 1.0}) + "\n")  # fmt: skip
    else:
        pq.write_table(pa.Table.from_pylist([{"prompt": "p", "agent_name": "cudagent_agent",
                                              "extra_info": {"task_id": "t"}}]), data)  # fmt: skip
    from cudagent.train.command import TrainRequest, check_config, command, stage_overrides

    req = TrainRequest(stage, data, str(tiny_model), tmp_path / "run", ["http://127.0.0.1:9"], ["trainer.save_freq=5"],
                       smoke=True)  # fmt: skip
    for smoke in (True, False):  # verl's own validate_config, as main_ppo runs it at launch: smoke and full scale
        check_config(TrainRequest(stage, data, str(tiny_model), tmp_path / "run", ["http://127.0.0.1:9"], smoke=smoke))
    config = _stage_config(stage, stage_overrides(req) + req.overrides)
    assert config.trainer.save_freq == 5  # the user's override wins
    if stage == "rft":
        assert config.data.custom_cls.name == "LedgerSFTDataset" and config.model.path == str(tiny_model)
    else:
        assert config.trainer.total_training_steps == 2  # the smoke config
        assert config.algorithm.adv_estimator == "gae" and config.algorithm.rollout_correction.rollout_is == "token"
        assert config.algorithm.rollout_correction.rollout_rs == "token_k1"  # the per-token BF16 monitor
        assert config.actor_rollout_ref.rollout.calculate_log_probs is True
        assert list(config.cudagent.evaluator_urls) == ["http://127.0.0.1:9"]
        assert config.cudagent.single_turn is (stage == "warmup")
        assert config.trainer.critic_warmup == (0 if stage != "critic" else 1000000)  # smoke keeps the stage's
    argv = [
        sys.executable,
        "-m",
        "cudagent",
        "train",
        "--stage",
        stage,
        "--data",
        str(data),
        "--model",
        str(tiny_model),
        "--out",
        str(tmp_path / "run"),
        "-o",
        "trainer.save_freq=5",
        "--smoke",
        "--dry-run",
    ]
    if stage != "rft":
        argv += ["--evaluator", "http://127.0.0.1:9"]
    env = {**os.environ, "CUDAGENT_EVALUATOR_TOKEN": "some-token", "CUDAGENT_HOME": str(tmp_path / "home")}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    if stage != "rft":  # the config passed verl's checks; nothing listens there: the evaluator check refuses, exit 3
        assert proc.returncode == 3 and "nothing answers at" in proc.stderr, proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    printed = proc.stdout.strip()
    assert printed.startswith("torchrun --standalone --nproc_per_node=8 -m verl.trainer.sft_trainer --config-path")
    assert printed.endswith("trainer.save_freq=5") and " ".join(command(req)[:6]) in printed
    readme = (ROOT / "docs" / "train.md").read_text()  # the training page the README links
    assert "python -m verl.trainer.main_ppo --config-path" in readme and "--config-name warmup" in readme


@pytest.mark.slow
def test_the_dry_run_of_an_rl_stage_against_a_live_service(tiny_model, service, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": "p", "agent_name": "cudagent_agent", "extra_info": {"a": 1}}]),
                   data)  # fmt: skip
    env = {**os.environ, "CUDAGENT_EVALUATOR_TOKEN": TOKEN}
    argv = [sys.executable, "-m", "cudagent", "train", "--stage", "agentic", "--data", str(data), "--model",
            str(tiny_model), "--evaluator", service.url, "--dry-run"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "-m verl.trainer.main_ppo --config-path" in proc.stdout and "--config-name agentic" in proc.stdout
    assert f'cudagent.evaluator_urls=["{service.url}"]' in proc.stdout.replace("'", "")
    # the warm-up stage's dry run reads as the README shows it: the same entry point, config and overrides in order
    readme = (ROOT / "docs" / "train.md").read_text()  # the training page the README links
    shown = readme[readme.index("for the warm-up stage it reads") :].split("```")[1].split()
    warmup = subprocess.run([*argv[:5], "warmup", *argv[6:]], capture_output=True, text=True, env=env)
    assert warmup.returncode == 0, warmup.stderr
    printed = shlex.split(warmup.stdout)
    assert printed[1:4] == shown[1:4] and printed[5:7] == shown[5:7] == ["--config-name", "warmup"]
    assert printed[4].endswith("cudagent/train/config") and shown[4].endswith("cudagent/train/config")
    keys = [t.split("=", 1)[0] for t in shown if "=" in t]
    assert [t.split("=", 1)[0] for t in printed if "=" in t][: len(keys)] == keys
    bad = subprocess.run([*argv[:-1], "--dry-run"], capture_output=True, text=True,
                         env={**env, "CUDAGENT_EVALUATOR_TOKEN": "wrong"})  # fmt: skip
    assert bad.returncode in (2, 3) and "token" in bad.stderr, bad.stderr


def test_gae_keeps_the_reward_on_the_last_model_token_of_a_multi_turn_mask():
    import torch
    from verl.trainer.ppo.core_algos import compute_gae_advantage_return

    # reply (3 tokens) | observation (2) | reply (2) | padding (2)
    mask = torch.tensor([[1, 1, 1, 0, 0, 1, 1, 0, 0]], dtype=torch.float32)
    rewards = torch.zeros_like(mask)
    rewards[0, 6] = 3.0  # the last response token, the model's (the ledger is trimmed so that it is)
    values = torch.zeros_like(mask)
    adv, returns = compute_gae_advantage_return(rewards, values, mask, torch.tensor(1.0), torch.tensor(1.0))
    assert returns[0, :7][mask[0, :7].bool()].tolist() == [3.0] * 5  # every sampled token sees the reward
    # put on an observation token instead, the reward is lost: why the ledger ends on a model token
    lost = torch.zeros_like(mask)
    lost[0, 4] = 3.0
    _, returns = compute_gae_advantage_return(lost, values, mask, torch.tensor(1.0), torch.tensor(1.0))
    assert returns[0][mask[0].bool()].abs().sum() == 0


def test_an_rft_episode_longer_than_verls_default_cap_goes_through_its_micro_batching(tiny_model, tmp_path):
    """Episodes of 9,000 tokens (over verl's default 8,192 a micro-batch) and 120,000 (an agentic-stage episode,
    over the 40,960 this stage once allowed), through the stage's composed config, the dataset, verl's SFT collator
    and verl's dynamic micro-batching with the budget its engine computes (per GPU times the sequence-parallel
    size, workers/engine/utils.py), as its SFT trainer runs them."""
    from omegaconf import OmegaConf
    from verl.utils import tensordict_utils as tu
    from verl.utils.dataset.dataset_utils import SFTTensorCollator
    from verl.utils.seqlen_balancing import rearrange_micro_batches

    from cudagent.agent.backends import load_tokenizer
    from cudagent.agent.ledger import Ledger
    from cudagent.train.rft import LedgerSFTDataset, write_episodes

    tok = load_tokenizer(str(tiny_model))
    lengths = []
    episodes = []
    for n_prompt, n_reply in ((8_500, 500), (300, 200), (6_000, 114_000)):
        ledger = Ledger([11] * n_prompt)
        ledger.add_model([12] * n_reply, [-0.1] * n_reply)
        episodes.append({"run_id": f"e{n_prompt}", "tier": 3, "tool_validity": 1.0, **ledger.to_dict()})
        lengths.append(n_prompt + n_reply)
    assert write_episodes(episodes, tmp_path / "kept.jsonl") == 3
    config = _stage_config("rft", [f"data.train_files={tmp_path / 'kept.jsonl'}", f"model.path={tiny_model}"])
    assert config.data.use_dynamic_bsz  # the cap below is what verl packs micro-batches to
    dataset = LedgerSFTDataset(str(tmp_path / "kept.jsonl"), tok, OmegaConf.to_container(config.data, resolve=True))
    batch = tu.get_tensordict(SFTTensorCollator(config.data.pad_mode)([dataset[i] for i in range(3)]))  # nested
    budget = int(config.data.max_token_len_per_gpu) * int(config.engine.ulysses_sequence_parallel_size)
    micro, _ = rearrange_micro_batches(batch, max_token_len=budget)
    packed = [int(n) for m in micro for n in m["input_ids"].offsets().diff()]
    assert sorted(packed) == sorted(lengths)  # every episode whole, the long one included


@pytest.mark.slow  # more than a few seconds (the inner loop leaves it out)
@pytest.mark.parametrize("stage", ["critic", "agentic", "rft"])
def test_the_critic_agentic_and_rft_stages_hold_a_whole_131k_episode(stage, tiny_model, tmp_path):
    """The paper's context (8K prompt, 131K after it) in every stage that meets multi-turn episodes: each pass that
    packs sequences has dynamic batching with a budget that, times its sequence-parallel size, holds the longest
    one; the check says which key to raise when an override breaks that."""
    from cudagent.errors import CudagentError
    from cudagent.train.command import TrainRequest, check_sequence_room, composed

    def request(*overrides):
        return TrainRequest(stage, tmp_path / "d", str(tiny_model), tmp_path / "run", ["http://127.0.0.1:9"],
                            list(overrides))  # fmt: skip

    config = composed(request())
    if stage == "rft":
        longest = config.data.max_length
        passes = {"data.max_token_len_per_gpu": (config.data.use_dynamic_bsz, config.data.max_token_len_per_gpu,
                                                 config.engine.ulysses_sequence_parallel_size)}  # fmt: skip
    else:
        longest = config.data.max_prompt_length + config.data.max_response_length
        actor, ref, rollout, critic = (config.actor_rollout_ref.actor, config.actor_rollout_ref.ref,
                                       config.actor_rollout_ref.rollout, config.critic)  # fmt: skip
        sp, critic_sp = actor.fsdp_config.ulysses_sequence_parallel_size, critic.fsdp.ulysses_sequence_parallel_size
        passes = {
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": (actor.use_dynamic_bsz,
                                                                  actor.ppo_max_token_len_per_gpu, sp),
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": (rollout.log_prob_use_dynamic_bsz,
                                                                         rollout.log_prob_max_token_len_per_gpu, sp),
            "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": (
                ref.log_prob_use_dynamic_bsz, ref.log_prob_max_token_len_per_gpu,
                ref.fsdp_config.ulysses_sequence_parallel_size),
            "critic.ppo_max_token_len_per_gpu": (critic.use_dynamic_bsz, critic.ppo_max_token_len_per_gpu, critic_sp),
            "critic.forward_max_token_len_per_gpu": (critic.use_dynamic_bsz, critic.forward_max_token_len_per_gpu,
                                                     critic_sp),
        }  # fmt: skip
        assert config.actor_rollout_ref.model.use_remove_padding and critic.model.use_remove_padding  # SP needs it
    assert longest == 8192 + 131072
    for key, (dynamic, budget, parallel) in passes.items():
        assert dynamic and parallel == 8 and budget * parallel >= longest, key
    check_sequence_room(request(), config)
    for key in passes:
        with pytest.raises(CudagentError, match=f"-o {key}=17408 or more"):
            check_sequence_room(request(), composed(request(f"{key}=8192")))
    with pytest.raises(CudagentError, match="does not divide its 4 GPUs"):
        if stage == "rft":
            short = TrainRequest(stage, tmp_path / "d", str(tiny_model), tmp_path / "run", gpus=4)
        else:
            short = request("trainer.n_gpus_per_node=4")
        check_sequence_room(short, composed(short))


def test_the_rft_filter_and_dataset_follow_verls_multi_turn_sft_dataset(tiny_model, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from omegaconf import OmegaConf
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    from cudagent.agent.backends import load_tokenizer
    from cudagent.agent.ledger import Ledger
    from cudagent.agent.renderer import ChatRenderer
    from cudagent.train.rft import LedgerSFTDataset, write_episodes

    tok = load_tokenizer(str(tiny_model))
    renderer = ChatRenderer(tok)
    messages = [{"role": "system", "content": "You write kernels."}, {"role": "user", "content": "Make it fast."}]
    reply = [*tok("Done.", add_special_tokens=False)["input_ids"], end_of_turn(tok)]
    ledger = Ledger(renderer.opening_ids(messages))
    ledger.add_model(reply, [-0.1] * len(reply))
    episodes = [
        {"run_id": "kept", "tier": 3, "tool_validity": 1.0, **ledger.to_dict()},
        {"run_id": "wrong", "tier": -1, "tool_validity": 1.0, **ledger.to_dict()},
        {"run_id": "sloppy", "tier": 2, "tool_validity": 0.5, **ledger.to_dict()},
    ]
    assert write_episodes(episodes, tmp_path / "kept.jsonl") == 1
    pq.write_table(pa.Table.from_pylist([{"messages": [*messages, {"role": "assistant", "content": "Done."}]}]),
                   tmp_path / "sft.parquet")  # fmt: skip
    for pad_mode in ("no_padding", "right"):
        config = OmegaConf.create({"max_length": 256, "truncation": "error", "pad_mode": pad_mode,
                                   "messages_key": "messages"})  # fmt: skip
        theirs = MultiTurnSFTDataset(str(tmp_path / "sft.parquet"), tok, config)[0]
        ours_set = LedgerSFTDataset(str(tmp_path / "kept.jsonl"), tok, config)
        assert len(ours_set) == 1
        ours = ours_set[0]
        assert set(ours) == set(theirs) and all(ours[k].dtype == theirs[k].dtype for k in ours), (ours, theirs)
        # the same tokens and the loss on the assistant's tokens only; verl's also trains on the newline its chat
        # template writes after the end-of-turn token, which the model never sampled: the ledger does not
        n = len(ledger.prompt_ids) + len(reply)
        assert ours["input_ids"][:n].tolist() == theirs["input_ids"][:n].tolist()
        assert ours["loss_mask"][:n].tolist() == theirs["loss_mask"][:n].tolist()
        assert ours["input_ids"][ours["loss_mask"].bool()].tolist() == reply
        assert tok.decode(theirs["input_ids"][n : n + 1]) == "\n" and int(theirs["loss_mask"][n]) == 1
        if pad_mode == "right":
            assert all(ours[k].shape == theirs[k].shape == (256,) for k in ours)
            assert ours["attention_mask"].sum() == n and theirs["attention_mask"].sum() == n + 1
        else:
            assert len(ours["input_ids"]) == n and len(theirs["input_ids"]) == n + 1


@pytest.mark.slow  # each case runs the command: seconds (the inner loop leaves it out)
@pytest.mark.parametrize(
    "args, code, message",
    [
        (["--stage", "nope"], 2, "unknown stage 'nope'"),
        (["--stage", "agentic", "--data", "NOCOLS"], 2, "lacks the columns agent_name, extra_info"),
        (["--stage", "agentic", "--data", "GOOD", "--model", "NOPE"], 2, "no such directory"),
        (["--stage", "agentic", "--data", "GOOD"], 2, "give --evaluator URL"),
        (["--stage", "agentic", "--data", "GOOD", "--evaluator", "http://127.0.0.1:9"], 3, "nothing answers at"),
        (["--stage", "rft", "--data", "GOOD"], 2, "no episodes with prompt_ids"),
        (["--stage", "agentic", "--data", "GOOD", "-o", "noequals"], 2, "is not key=value"),
        (["--stage", "agentic", "--data", "GOOD", "-o", "trainer.nonexistent_key=1"], 2, "config does not compose"),
        (
            ["--stage", "critic", "--data", "GOOD", "-o", "actor_rollout_ref.actor.loss_agg_mode=nope"],
            2,
            "verl refuses the critic",
        ),
        (["--stage", "agentic", "--data", "GOOD", "--gpus", "0"], 2, "at least one GPU"),
        (["--stage", "agentic", "--data", "GOOD", "--gpus", "4"], 2, "does not divide its 4 GPUs"),
        (
            ["--stage", "critic", "--data", "GOOD", "-o", "data.max_response_length=262144"],
            2,
            "longest sequence (270336 tokens)",
        ),
        (["--stage", "agentic", "--data", "GOOD", "--resume-from", "NOPE"], 2, "no such checkpoint directory"),
    ],
)
def test_bad_input_is_one_sentence_and_an_exit_code(args, code, message, tiny_model, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"prompt": "p"}]), tmp_path / "nocols.parquet")
    pq.write_table(pa.Table.from_pylist([{"prompt": "p", "agent_name": "a", "extra_info": {"a": 1}}]),
                   tmp_path / "good.parquet")  # fmt: skip
    good = tmp_path / ("good.jsonl" if "rft" in args else "good.parquet")
    if "rft" in args:
        good.write_text('{"prompt": "not an episode"}\n')
    names = {"NOCOLS": tmp_path / "nocols.parquet", "GOOD": good, "NOPE": tmp_path / "missing-model"}
    args = [str(names.get(a, a)) for a in args]
    if "--model" not in args:
        args += ["--model", str(tiny_model)]
    if "--data" not in args:
        args += ["--data", str(good)]
    env = {**os.environ, "CUDAGENT_EVALUATOR_TOKEN": "some-token", "CUDAGENT_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-m", "cudagent", "train", *args, "--dry-run"], capture_output=True,
                          text=True, env=env)  # fmt: skip
    assert proc.returncode == code and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


STAGE_STAND_IN = """
import json, os, subprocess, sys, time
run = sys.argv[1]
child = subprocess.Popen(["sleep", "300"])  # a worker of the stage: it must go with the group
open(os.path.join(run, "child.pid"), "w").write(str(child.pid))
gaps = [0.01, 0.02, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
for step, gap in enumerate(gaps, 1):
    with open(os.path.join(run, "rollouts.jsonl"), "a") as f:
        for i in range(2):
            f.write(json.dumps({"t": time.time(), "task": "t", "reward": 3.0 if i else -1.0, "tier": 3 if i else -1,
                                "faster_than_compile": i, "turns": 5, "tool_validity": 1.0,
                                "min_token_prob": 0.01}) + "\\n")
    with open(os.path.join(run, "metrics.jsonl"), "a") as f:
        f.write(json.dumps({"step": step, "data": {"critic/score/mean": 1.0,
                                                   "rollout_corr/log_ppl_diff_max": gap}}) + "\\n")
    time.sleep(0.5)
time.sleep(300)
"""


def test_a_blowup_stops_the_stage_group_and_status_reads_the_run(tmp_path):
    """The supervisor over a stand-in for verl's trainer (a real process group writing what verl's file logger and the
    agent loop write): two steps past the limit stop it, child processes included; status and its plot read it."""
    import time

    from cudagent.train.monitor import StopRule
    from cudagent.train.status import summarize
    from cudagent.train.supervise import supervise

    run = tmp_path / "run"
    run.mkdir()
    record = {"stage": "agentic", "model": "m", "data": "d", "episodes_per_step": 2}
    (run / "command.json").write_text(json.dumps(record))
    started = time.monotonic()
    code, why = supervise([sys.executable, "-c", STAGE_STAND_IN, str(run)], dict(os.environ), run, StopRule(), 0.2)
    assert why == "steps 3-4: largest |log(pi_train/pi_rollout)| 3 > 0.5", why
    assert code != 0 and time.monotonic() - started < 60
    child = int((run / "child.pid").read_text())
    time.sleep(0.5)
    state = Path(f"/proc/{child}/stat").read_text().split()[2] if Path(f"/proc/{child}").exists() else "gone"
    assert state in ("gone", "Z"), state  # the stage's own child went with the group
    summary = summarize(run)
    assert summary["steps"] >= 4 and summary["monitors"]["stop"].startswith("steps ")
    assert summary["last"]["reward_mean"] == 1.0 and summary["last"]["faster_than_compile"] == 0.5
    assert summary["last"]["tiers"] == {"-1": 1, "1": 0, "2": 0, "3": 1} and summary["last"]["episodes"] == 2
    assert (run / "progress.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    status = [sys.executable, "-m", "cudagent", "train", "status"]
    proc = subprocess.run([*status, str(run)], capture_output=True, text=True)
    assert proc.returncode == 0 and json.loads(proc.stdout)["stage"] == "agentic"
    empty = subprocess.run([*status, str(tmp_path)], capture_output=True, text=True)
    assert empty.returncode == 2 and "is not a cudagent train run" in empty.stderr


@pytest.mark.slow  # more than a few seconds (the inner loop leaves it out)
def test_a_ray_job_carries_the_evaluator_token_in_a_file_only_the_user_reads(tiny_model, tmp_path):
    import stat

    import yaml

    from cudagent.train.command import TrainRequest, command, write_runtime_env

    req = TrainRequest("agentic", tmp_path / "d.parquet", str(tiny_model), tmp_path / "run", ["http://h:1"],
                       ray_address="http://head:8265")  # fmt: skip
    argv = command(req)
    assert argv[:5] == ["ray", "job", "submit", "--address", "http://head:8265"]
    path = write_runtime_env(req, {"CUDAGENT_EVALUATOR_TOKEN": "s3cret", "HOME": "/root"})
    assert argv[argv.index("--runtime-env") + 1] == str(path) and "s3cret" not in " ".join(argv)
    env_vars = yaml.safe_load(path.read_text())["env_vars"]
    assert env_vars["CUDAGENT_EVALUATOR_TOKEN"] == "s3cret" and "HOME" not in env_vars
    assert env_vars["CUDAGENT_TRAIN_ROLLOUTS"].endswith("rollouts.jsonl")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


_SUPERVISOR = """
import json, os, sys
from pathlib import Path
from cudagent.train.monitor import StopRule
from cudagent.train.supervise import supervise
argv, stop = json.loads(sys.argv[1]), json.loads(sys.argv[2])
try:
    code, _ = supervise(argv, dict(os.environ), Path(sys.argv[3]), StopRule(), 0.1, stop_remote=stop)
except Exception as exc:  # the supervisor's way of saying it was terminated
    sys.exit(143 if type(exc).__name__ == "Terminated" else 1)
sys.exit(f"the stage ended by itself (exit {code}) before any signal")  # exit 1, said on stderr
"""


def test_sigterm_to_the_supervisor_stops_the_stage_group(tmp_path):
    """A scheduler's SIGTERM to `cudagent train` ends the stage it started, its own children included, and then
    the supervisor itself."""
    import signal
    import time

    run = tmp_path / "run"
    run.mkdir()
    stand_in = """
import os, subprocess, sys, time
child = subprocess.Popen(["sleep", "300"])
open(os.path.join(sys.argv[1], "child.pid"), "w").write(str(child.pid))
time.sleep(300)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    stage = [sys.executable, "-c", stand_in, str(run)]
    supervisor = subprocess.Popen([sys.executable, "-c", _SUPERVISOR, json.dumps(stage), "null", str(run)], env=env)
    deadline = time.monotonic() + 60
    while not (run / "child.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int((run / "child.pid").read_text())
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(timeout=60) == 143
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and Path(f"/proc/{child}/stat").read_text().split()[2] != "Z":
        assert time.monotonic() < deadline, "the stage's child outlived the supervisor"
        time.sleep(0.05)


def _gone(pids: list[int], within_s: float) -> list[int]:
    """Those of `pids` still running (not zombies) after up to `within_s` seconds."""
    import time

    def alive(pid):
        try:
            return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].split()[0] != "Z"
        except OSError:
            return False

    deadline = time.monotonic() + within_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


@pytest.mark.slow
def test_sigterm_ends_the_ray_cluster_a_local_stage_started(tmp_path):
    """main_ppo on one node starts its own Ray (ray.init): the GCS, the raylet and the actors' worker processes.
    A SIGTERM to `cudagent train` ends every one of them, not only the driver."""
    import signal
    import time

    stand_in = """
import os, sys, time
import psutil, ray
ray.init(num_cpus=1, include_dashboard=False, object_store_memory=100 << 20)

@ray.remote
class Actor:
    def pid(self):
        return os.getpid()

pids = [ray.get(Actor.remote().pid.remote())] + [p.pid for p in psutil.Process().children(recursive=True)]
open(os.path.join(sys.argv[1], "pids"), "w").write(" ".join(map(str, pids)))
time.sleep(300)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ADDRESS": ""}
    stage = [sys.executable, "-c", stand_in, str(tmp_path)]
    supervisor = subprocess.Popen([sys.executable, "-c", _SUPERVISOR, json.dumps(stage), "null", str(tmp_path)],
                                  env=env)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "pids").exists():
            assert supervisor.poll() is None and time.monotonic() < deadline, "the stand-in stage never started Ray"
            time.sleep(0.1)
        time.sleep(0.2)  # the file is written in one call; let it close
        pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
        assert len(pids) >= 3  # the actor's worker, the GCS and the raylet at least
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(timeout=120) == 143
        assert _gone(pids, 30) == []
    finally:
        if supervisor.poll() is None:
            supervisor.kill()


def ray_logs(temp: str) -> str:
    """The tails of a head node's job agent and dashboard logs (what says why it took no job)."""
    logs = Path(temp) / "session_latest" / "logs"
    tails = []
    for name in ("dashboard_agent.log", "dashboard.log", "raylet.out", "gcs_server.out"):
        for path in sorted(logs.glob(name))[:1]:
            tails.append(f"--- {name}\n" + path.read_text(errors="replace")[-1500:])
    return "\n".join(tails) or f"(no logs under {logs})"


@pytest.mark.slow
def test_sigterm_stops_a_stage_submitted_to_a_ray_cluster(tmp_path):
    """With --ray-address the stage runs on the cluster and the process here only follows its logs: a SIGTERM stops
    the job there (`ray job stop` on its submission id), on a real head node with its job server."""
    import secrets
    import signal
    import socket
    import tempfile
    import time

    from cudagent.train.command import TrainRequest, command, stop_command

    def free_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    port, dashboard = free_port(), free_port()
    address = f"http://127.0.0.1:{dashboard}"
    temp = tempfile.mkdtemp(prefix="rc")  # its own: no other test's ray.init() finds this cluster
    # Ray's default for a new cluster is token authentication: the head and every `ray job` call share this token
    # (a user's shell exports it the same way), whatever ~/.ray holds from other clusters.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ADDRESS": "", "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN": secrets.token_hex(32)}  # fmt: skip
    ray = str(Path(sys.executable).with_name("ray"))
    # every port its own: Ray's fixed defaults (the job agent's 52365 among them) collide with a cluster another test
    # started beside this one, and a job agent that cannot bind takes no job
    ports = [f"--{name}={free_port()}" for name in ("dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                                                   "metrics-export-port", "runtime-env-agent-port",
                                                   "ray-client-server-port")]  # fmt: skip
    head = subprocess.Popen([ray, "start", "--head", "--block", f"--port={port}", f"--dashboard-port={dashboard}",
                             "--dashboard-host=127.0.0.1", "--include-dashboard=true", "--num-cpus=1", *ports,
                             f"--temp-dir={temp}"], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    supervisor = None
    try:
        req = TrainRequest("agentic", tmp_path / "d.parquet", "m", tmp_path / "run", ray_address=address)
        submit = command(req)
        job = [*submit[: submit.index("--runtime-env")], "--", sys.executable, "-c", "import time; time.sleep(300)"]
        stop = stop_command(req)
        assert job[:7] == ["ray", "job", "submit", "--address", address, "--submission-id", req.submission_id]
        assert stop == ["ray", "job", "stop", "--address", address, req.submission_id]
        job[0], stop[0] = ray, ray

        def status():
            out = subprocess.run([ray, "job", "status", "--address", address, req.submission_id], env=env,
                                 capture_output=True, text=True)  # fmt: skip
            return out.stdout + out.stderr

        # Ready means a job can be submitted: the head's job server answers `ray job list` seconds before the
        # node's job agent takes submissions, and a submission in between fails ("Failed to get head node agent").
        deadline = time.monotonic() + 300  # a loaded two-core machine took over three minutes once
        ready = [ray, "job", "submit", "--address", address, "--", sys.executable, "-c", "pass"]
        while (tried := subprocess.run(ready, env=env, capture_output=True, text=True)).returncode:
            assert head.poll() is None and time.monotonic() < deadline, (
                f"the head node never took a job (head exit {head.poll()}); the last submission said:\n"
                f"{(tried.stdout + tried.stderr)[-2000:]}\n{ray_logs(temp)}"
            )
            time.sleep(0.5)
        supervisor = subprocess.Popen([sys.executable, "-c", _SUPERVISOR, json.dumps(job), json.dumps(stop),
                                       str(tmp_path)], env=env)  # fmt: skip
        while "RUNNING" not in status():
            assert supervisor.poll() is None and time.monotonic() < deadline, status()
            time.sleep(0.5)
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(timeout=180) == 143
        while "was stopped" not in status():  # what `ray job status` prints for a job in the STOPPED state
            assert time.monotonic() < deadline, status()
            time.sleep(0.5)
    finally:
        if supervisor is not None and supervisor.poll() is None:
            supervisor.kill()
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)


@pytest.mark.parametrize("module", ["cudagent.train.reward", "cudagent.train.monitor", "cudagent.train.rft",
                                    "cudagent.data.compose", "cudagent.agent.ledger",
                                    "cudagent.train.single_turn"])  # fmt: skip
def test_doctests(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


class _ScriptedVLLM(CompletionsHandler):
    """vLLM's /v1/completions replying from the scripts above, by the task in the prompt and the number of assistant
    turns already in it."""

    model_id = "warmup-model"
    tokenizer = None

    def complete(self, body: dict) -> tuple[list[int], list[float], str]:
        prompt = self.tokenizer.decode(body["prompt"])
        script = BROKEN if "broken_axpby" in prompt else SOLVE
        turn = prompt.count("<|im_start|>assistant") - 1
        ids = self.tokenizer(script[min(turn, len(script) - 1)], add_special_tokens=False)["input_ids"]
        ids = [*ids[: body["max_tokens"] - 1], end_of_turn(self.tokenizer)]
        return ids, [-0.25] * len(ids), "stop"


@pytest.mark.slow
def test_rft_collect_samples_scores_and_keeps_episodes_from_a_served_model(tiny_model, service, tmp_path):
    import threading
    from http.server import ThreadingHTTPServer

    import pyarrow as pa
    import pyarrow.parquet as pq

    from cudagent.agent.backends import load_tokenizer
    from cudagent.train.rft import LedgerSFTDataset, read_episodes

    _ScriptedVLLM.tokenizer = load_tokenizer(str(tiny_model))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ScriptedVLLM)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    rows = [{"prompt": "p", "agent_name": "cudagent_agent", "extra_info": {"task_id": name, "task_source": TASK}}
            for name in ("axpby_small", "broken_axpby")]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    env = {**os.environ, "CUDAGENT_EVALUATOR_TOKEN": TOKEN}
    argv = [sys.executable, "-m", "cudagent", "train", "rft-collect", "--data", str(tmp_path / "train.parquet"),
            "--samples", "1", "--base-url", f"http://127.0.0.1:{server.server_port}/v1", "--tokenizer",
            str(tiny_model), "--evaluator", service.url, "--max-turns", "6", "--response-tokens", "8192",
            "--out", str(tmp_path / "kept.jsonl")]  # fmt: skip
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stderr
    kept = read_episodes(tmp_path / "kept.jsonl")
    assert "kept 1 of 2 episodes" in proc.stderr, proc.stderr  # one sample a task here: each solving one builds
    assert {e["task"] for e in kept} == {"axpby_small"} and all(e["tier"] >= 1 for e in kept)
    assert all(set(lp for lp, m in zip(e["response_logprobs"], e["response_mask"]) if m) == {-0.25} for e in kept)
    assert len(LedgerSFTDataset(str(tmp_path / "kept.jsonl"), _ScriptedVLLM.tokenizer, {"max_length": 65536})) == 1
    down = subprocess.run([*argv[:10], "http://127.0.0.1:9/v1", *argv[11:]], capture_output=True, text=True, env=env)
    assert down.returncode == 3 and "the model server does not answer" in down.stderr, down.stderr


def test_the_renderer_reads_the_end_of_a_turn_from_the_template(tiny_model):
    """SmolLM2's GGUF tokenizer names <|im_start|> its eos; its template ends turns with <|im_end|>. The stream the
    token driver appends must read exactly as the template renders the conversation (found by the rft-collect test:
    observations came after a stray `<|im_start|>assistant\\n-<|im_end|>`)."""
    from cudagent.agent.backends import load_tokenizer
    from cudagent.agent.renderer import ChatRenderer

    tok = load_tokenizer(str(tiny_model))
    r = ChatRenderer(tok)
    assert (r.eos, r.after_eos) == ("<|im_end|>", "\n") and end_of_turn(tok) in r.stop_ids
    opening = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}]
    observation = [{"role": "user", "content": "[bash] ok"}]
    ids = r.opening_ids(opening) + r.encode("Hi.") + [end_of_turn(tok)] + r.delta_ids(observation, model_stopped=True)
    whole = [*opening, {"role": "assistant", "content": "Hi."}, *observation]
    assert tok.decode(ids) == tok.apply_chat_template(whole, add_generation_prompt=True, tokenize=False)


def test_the_monitor_trust_region_rejects_nothing_and_reports_the_token_extremes():
    """The stage configs' never-rejecting token_k1 trust region, through verl's own function: the response mask comes
    back unchanged and its metrics carry the largest per-token |log(pi_train/pi_rollout)|, which the stop rule reads."""
    import torch
    from omegaconf import OmegaConf
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_rejection_mask

    from cudagent.train.command import CONFIG_DIR
    from cudagent.train.monitor import StopRule, breaches

    spec = OmegaConf.load(CONFIG_DIR / "cudagent_ppo.yaml").algorithm.rollout_correction
    torch.manual_seed(0)
    log_ratio = torch.randn(4, 16) * 0.01  # log(pi_train / pi_rollout): BF16 noise
    log_ratio[2, 5] = 3.0  # one token the trainer finds 20x likelier than the rollout engine did
    mask = torch.ones(4, 16, dtype=torch.long)
    mask[3, 10:] = 0
    kept, metrics = compute_rollout_rejection_mask(log_ratio, mask, spec.rollout_rs, str(spec.rollout_rs_threshold))
    assert torch.equal(kept, mask)
    row = {f"rollout_corr/{k}": v for k, v in metrics.items()}
    assert abs(row["rollout_corr/rollout_rs_token_k1_min"] + 3.0) < 1e-5  # k1 = -log ratio
    assert breaches(row, StopRule()) == ["largest |log(pi_train/pi_rollout)| 3 > 2"]
