"""The developer tooling that ships: benchmarks, fuzzing campaigns, soaks and plots."""
