"""`moenum bench` argument checks (the drivers themselves are benchmarks, not tests)."""
from conftest import moenum_cli


def test_bench_peer_needs_gpu_and_known_peer():
    proc = moenum_cli("bench", "--peer", "torch")
    assert proc.returncode == 2 and "--peer torch is a GPU comparison" in proc.stderr
    proc = moenum_cli("bench", "--gpu", "--peer", "jax")
    assert proc.returncode == 2 and "unknown peer 'jax'" in proc.stderr


def test_bench_layer_needs_gpu():
    proc = moenum_cli("bench", "--layer")
    assert proc.returncode == 2 and "--layer is a GPU benchmark" in proc.stderr
