"""The update: advantages and the loss (objective), training batches from units of any size (batching),
micro-batches for gradient accumulation (microbatch), and the loop that drives a job (trainer)."""
