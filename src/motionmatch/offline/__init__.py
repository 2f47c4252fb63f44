"""Offline work: scenarios, synthesis, replay, crowds, batches, quality, tuning, Dask."""
