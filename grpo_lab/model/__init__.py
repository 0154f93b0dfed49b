"""The policy: the built-in model (built once, cached) and local transformers models, their tokenizers,
the shared prompt KV cache and the chunked per-token log-probs of the policy and reference passes."""
