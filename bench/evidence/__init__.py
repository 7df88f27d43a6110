"""Issue 41: each paper's headline result reproduced on Headway, with plots (docs/evidence.md).

Run with `python bench/evidence/run.py {clipper,cloudflow,inferline,clockwork,all} [--quick]`.
"""
