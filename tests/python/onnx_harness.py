# SPDX-License-Identifier: BSD-3-Clause
"""ONNX export of models that call our operators, through `import custom_ops.onnx`, in a fresh
interpreter that has the package (the `site` fixture of conftest.py): each model is exported with
a dynamic batch dimension, checked with onnx.checker, and run in onnxruntime at several batch sizes
against the model itself.

Not a test module: test_onnx_export.py imports it (pytest puts this directory on sys.path).
"""

import json
import textwrap

from test_package import run_python

# how -> the export, as the fresh interpreter runs it: the dynamo exporter (translations found
# through torch.onnx's registry, or passed as a table), or the TorchScript-based one.
EXPORTS = {
    "registered": """
        def export(model, x, path):
            torch.onnx.export(model, (x,), str(path), dynamo=True, dynamic_shapes=({0: torch.export.Dim("batch")},))
        """,
    "table": """
        def export(model, x, path):
            torch.onnx.export(
                model, (x,), str(path), dynamo=True, custom_translation_table=custom_ops.onnx.translation_table(),
                dynamic_shapes=({0: torch.export.Dim("batch")},),
            )
        """,
    "legacy": """
        def export(model, x, path):
            torch.onnx.export(model, (x,), str(path), dynamo=False, input_names=["x"], dynamic_axes={"x": {0: "batch"}})
        """,
    # ReduceSum takes its axes as an attribute before opset 13, as an input since.
    "legacy_opset11": """
        def export(model, x, path):
            torch.onnx.export(
                model, (x,), str(path), dynamo=False, input_names=["x"], dynamic_axes={"x": {0: "batch"}},
                opset_version=11,
            )
        """,
}

# compare -> check(got, expected, x): "ok", else what differs; x is the model's input.
CHECKS = {
    # the same dtype, shape and bits
    "equal": """
        def check(got, expected, x):
            if got.dtype == expected.dtype and torch.equal(got, expected):
                return "ok"
            return f"not bit for bit: got {got.dtype} {got}, expected {expected.dtype} {expected}"
        """,
    # dtype and shape exactly; values of a sum of positive terms that onnxruntime adds in another
    # order than ours: each order is within (terms - 1) units of roundoff of the accumulation dtype
    # (float32, float64 for float64) of the exact sum, so the two are within twice that, or the
    # rounding of the result dtype where that is coarser (assert_close's default rtol and atol,
    # as its documentation lists them, for every floating dtype)
    "sum": """
        DEFAULT_TOLERANCES = {
            torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5),
            torch.float32: (1.3e-6, 1e-5), torch.float64: (1e-7, 1e-7),
        }
        def check(got, expected, x):
            terms = x.numel() // max(expected.numel(), 1)
            accumulate = torch.float64 if expected.dtype == torch.float64 else torch.float32
            reorder = terms * torch.finfo(accumulate).eps  # 2 * terms * unit roundoff
            rtol, atol = DEFAULT_TOLERANCES[expected.dtype]
            try:
                torch.testing.assert_close(got, expected, rtol=max(reorder, rtol), atol=atol)
                return "ok"
            except AssertionError as error:
                return str(error)
        """,
}

PROLOGUE = """
    import json, pathlib, tempfile, warnings
    import onnx, onnxruntime, torch
    import custom_ops, custom_ops.onnx
    """

EXPORT_AND_RUN = """
    results = {}
    for case, (model, x_dtype, shape) in CASES.items():
        model.eval()
        x = torch.randn(4, *shape, dtype=x_dtype)
        path = pathlib.Path(tempfile.mkdtemp()) / "model.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            export(model, x, path)
        onnx.checker.check_model(onnx.load(str(path)), full_check=True)
        try:
            session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        except Exception as error:  # onnxruntime's CPU kernels lack some operator for some dtype
            if "NOT_IMPLEMENTED" not in str(error):
                raise
            results[case] = {"unsupported": str(error).rsplit(":", 1)[-1].strip(), "checks": [], "ops": []}
            continue
        name = session.get_inputs()[0].name
        checks = []
        for batch in (1, 4, 7, 33):
            xb = torch.randn(batch, *shape, dtype=x_dtype)
            got = torch.from_numpy(session.run(None, {name: xb.numpy()})[0])
            checks.append(check(got, model(xb).detach(), xb))
        ops = sorted({node.op_type for node in onnx.load(str(path)).graph.node})
        results[case] = {"checks": checks, "ops": ops}
    print(json.dumps(results))
    """


def export_and_run(site, how, compare, cases):
    """Runs, in a fresh interpreter, every case of `cases`: Python source that defines CASES, a dict
    name -> (model, input dtype, input shape without the batch dim), using torch and custom_ops.
    Exported as EXPORTS[how], compared by CHECKS[compare]. Returns name -> {"checks": the check at
    each batch size ("ok" where it passed), "ops": the op types of the exported graph}, with
    "unsupported": onnxruntime's message where it has no kernel for an operator of the graph."""
    script = "\n".join(
        textwrap.dedent(part) for part in (PROLOGUE, cases, EXPORTS[how], CHECKS[compare], EXPORT_AND_RUN)
    )
    result = run_python(script, site)
    return json.loads(result.stdout.strip().splitlines()[-1])
