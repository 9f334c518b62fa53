import json

from fedalf_jax.cli import main


def test_bench_writes_both_timings(tmp_path, capsys):
    out = tmp_path / "b.json"
    argv = ["bench", "--dataset", "synthetic", "--model", "mlp", "--clients", "6", "--clients-per-round", "3",
            "--synthetic-train", "300", "--synthetic-test", "60", "--repeats", "2", "--algorithm", "fedalf",
            "--json", str(out)]
    assert main(argv) == 0
    res = json.loads(out.read_text())
    for k in ("compiled_s_per_round", "sequential_s_per_round", "compile_s", "server_s", "rounds_per_s"):
        assert res[k] > 0, k
    assert len(res["compiled_times"]) == 2 and 0 < res["server_share"] < 10
