"""What both trainers (`agentrl.sft`, `agentrl.train`) share: batches, backends (local, FSDP2,
DeepSpeed, LoRA), checkpoint helpers, the optimizer, metrics, model settings and the config
sections they nest. It imports neither trainer."""
