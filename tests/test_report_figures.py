"""The report's curves figure with many methods (issue 49, item 7): every method its own colour and line
style, in both panels, and the legend outside the plots."""

import numpy as np

from fedalf_jax.reporting import figures
from fedalf_jax.reporting.runs import Cell, Run


def test_line_styles_are_distinct_up_to_fourteen_methods_and_beyond():
    for n in (1, 10, 14, 20, 33):
        styles = figures.line_styles(n)
        assert len(set(styles)) == n, n
    assert len({c for c, _ in figures.line_styles(14)}) == 14  # 14 colours, not 10 colours with 4 shared


def _cell(i: int) -> Cell:
    r = Run(name=f"r{i}", status="done", cfg={}, rounds=np.arange(0, 50, 5), acc=np.linspace(0.1, 0.5 + 0.02 * i, 10),
            angle=np.linspace(40, 10 + i, 10))
    c = Cell("mlp", "fmnist", "pat1", f"Method{i}", (i,), "lr", eta=0.1)
    c.done[0.1] = [r]
    return c


def test_fourteen_methods_draw_fourteen_styles_with_the_legend_off_the_plots(tmp_path, monkeypatch):
    drawn = []
    real = figures._save
    monkeypatch.setattr(figures, "_save", lambda fig, path: (drawn.append(fig), real(fig, path))[1])
    figures.curves_figure([_cell(i) for i in range(14)], tmp_path / "curves.png", "mlp, fmnist pat1")
    (fig,) = drawn
    acc, ang = fig.axes
    styles = [(line.get_color(), line.get_linestyle()) for line in acc.get_lines()]
    assert len(set(styles)) == 14  # FedLF and PropFair, FedALF and TERM no longer share a colour
    assert styles == [(line.get_color(), line.get_linestyle()) for line in ang.get_lines()]  # the same per method
    (legend,) = fig.legends
    assert len(legend.get_texts()) == 14
    fig.canvas.draw()
    box = legend.get_window_extent()
    for ax in (acc, ang):
        assert not box.overlaps(ax.get_window_extent()), "the legend covers a plot"
    assert not acc.get_legend()  # none inside the accuracy axes


def test_the_table_and_figures_state_the_dirichlet_alpha_and_the_clients(tmp_path):
    """Issue 49 item 7: no report said the partition's Dirichlet α or the number of clients."""
    from test_report import make_run
    from fedalf_jax.reporting import report
    for seed, alpha in ((0, 0.1), (1, 0.1), (2, 0.5)):
        make_run(tmp_path / "runs", f"d{seed}", final_acc=0.6, final_angle=20.0, seed=seed, partition="dirichlet",
                 alpha=alpha, clients=6)
    make_run(tmp_path / "runs", "p", final_acc=0.6, final_angle=20.0, partition="pat1", alpha=0.3, clients=5)
    res = report([str(tmp_path / "runs")], str(tmp_path / "rep"))
    md = open(res["markdown"]).read()
    assert "| algorithm | fmnist pat1 (5 clients) | fmnist dirichlet (α=0.1/0.5, 6 clients) |" in md, md[:600]
    assert "α=0.3" not in md  # pat1 reads no α
