"""``torch.distributed._composable``: where FSDP2 lived before ``torch.distributed.fsdp``."""
