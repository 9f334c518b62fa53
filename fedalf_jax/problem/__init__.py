"""The learning problem: datasets, partitions over clients, models."""
