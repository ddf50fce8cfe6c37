"""torch.distributed.elastic: the parts a training script launched by torchrun (or emberrun)
imports; ember's launcher is ``ember.distributed.run``."""
