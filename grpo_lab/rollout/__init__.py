"""Rollouts: G completions per prompt sampled with a shared prompt cache (generate), and held-out
evaluation, n samples per prompt scored into eval rows (evaluation)."""
