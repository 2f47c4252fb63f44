"""Learned motion matching (Holden et al. 2020): networks trained from a pose database replace it at
run time. `model` (the file), `inference` (numpy), `dataset` (training batches), `train` (the only
module that imports the training framework, JAX), `commands` (the command line)."""
