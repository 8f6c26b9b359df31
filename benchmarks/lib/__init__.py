"""What the benchmarks share: settings, the timer, the encoded cache, synthetic data and the peers."""
