"""Rollouts: the engines that draw G completions per prompt (`engine`: what an engine is; `engines`: their registry;
`hf_engine`, `vllm_engine`; `external`: what an engine outside the policy module needs), the one rule by which every
engine's samples end, count and decode (`generate`), and held-out evaluation, n samples per prompt scored into eval
rows (`evaluation`)."""
