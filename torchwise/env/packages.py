"""The doctor's checks of Python and the packages: torch's build, a torchvision that pairs with it, numpy
that round-trips through torch, and the optional packages export and predict need."""
from __future__ import annotations

import importlib
import platform
import sys

from torchwise.env.report import INFO, OK, PROBLEM, WARNING, Check


def check_python() -> Check:
    version = platform.python_version()
    if sys.version_info < (3, 10):
        return Check("python", PROBLEM, f"Python {version} is older than torchwise supports",
                     fix="use Python 3.10 or newer", details={"version": version})
    return Check("python", OK, f"Python {version} ({platform.python_implementation()}, {sys.executable})",
                 details={"version": version, "executable": sys.executable})


def check_torch(torch) -> Check:
    build = "CPU-only build"
    if torch.version.cuda:
        build = f"CUDA {torch.version.cuda} build"
    elif getattr(torch.version, "hip", None):
        build = f"ROCm {torch.version.hip} build"
    cudnn = None
    try:
        if torch.backends.cudnn.is_available():
            v = torch.backends.cudnn.version()
            cudnn = f"{v // 10000}.{(v % 10000) // 100}.{v % 100}" if v and v >= 10000 else str(v)
    except Exception:  # cuDNN library present in the wheel but not loadable
        cudnn = None
    details = {"version": torch.__version__, "cuda": torch.version.cuda,
               "hip": getattr(torch.version, "hip", None), "cudnn": cudnn,
               "debug": bool(getattr(torch.version, "debug", False)),
               "num_threads": torch.get_num_threads()}
    summary = f"torch {torch.__version__} ({build}" + (f", cuDNN {cudnn})" if cudnn else ")")
    if torch.version.cuda and cudnn is None:
        return Check("torch", WARNING, summary + "; cuDNN cannot be loaded, convolutions on GPU will be slow or fail",
                     fix="reinstall torch so that its bundled cuDNN wheel (nvidia-cudnn-cu*) is installed", details=details)
    if details["debug"]:
        return Check("torch", WARNING, summary + "; this is a DEBUG build (much slower)",
                     fix="install a release build of torch", details=details)
    return Check("torch", OK, summary, details=details)


def _expected_torchvision(torch_version: str) -> str | None:
    # torchvision 0.(minor+15) pairs with torch 2.minor (0.15 <-> 2.0 ... 0.29 <-> 2.14).
    parts = torch_version.split("+")[0].split(".")
    if len(parts) < 2 or parts[0] != "2" or not parts[1].isdigit():
        return None
    return f"0.{int(parts[1]) + 15}"


def check_torchvision(torch) -> Check:
    try:
        import torchvision
    except Exception as exc:  # ImportError, or a binary mismatch raising at import
        return Check("torchvision", WARNING, f"torchvision cannot be imported ({type(exc).__name__}: {exc})"[:300],
                     fix=f"pip install torchvision=={_expected_torchvision(torch.__version__) or '<matching>'}.* "
                         "(needed for image tasks)", details={"error": str(exc)[:500]})
    version = torchvision.__version__
    expected = _expected_torchvision(torch.__version__)
    details = {"version": version, "expected_series": expected}
    try:  # a compiled torchvision op: fails with "operator torchvision::nms does not exist" on a mismatch
        boxes = torch.tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0]])
        keep = torchvision.ops.nms(boxes, torch.tensor([0.9, 0.8]), 0.5)
        assert keep.tolist() == [0]
    except Exception as exc:
        return Check("torchvision", PROBLEM, f"torchvision {version}: its compiled operators do not work with "
                     f"torch {torch.__version__} ({type(exc).__name__}: {str(exc)[:200]})",
                     fix=f"pip install torchvision=={expected or '<the release matching your torch>'}.*",
                     details=details | {"error": str(exc)[:500]})
    if expected and not version.startswith(expected):
        return Check("torchvision", WARNING, f"torchvision {version} is not the release paired with torch "
                     f"{torch.__version__} (expected {expected}.x)",
                     fix=f"pip install torchvision=={expected}.*", details=details)
    return Check("torchvision", OK, f"torchvision {version} (compiled ops work)", details=details)


def check_numpy(torch) -> Check:
    try:
        import numpy as np
    except Exception as exc:
        return Check("numpy", PROBLEM, f"numpy cannot be imported: {exc}", fix="pip install numpy")
    details = {"version": np.__version__}
    try:
        arr = np.arange(6, dtype=np.float32).reshape(2, 3)
        back = torch.from_numpy(arr).mul(2).numpy()
        assert float(back.sum()) == 30.0
    except Exception as exc:
        return Check("numpy", PROBLEM, f"numpy {np.__version__} does not interoperate with torch "
                     f"{torch.__version__}: {str(exc)[:200]}",
                     fix="pip install 'numpy<2' or upgrade torch (torch built against numpy 1 fails with numpy 2)",
                     details=details | {"error": str(exc)[:500]})
    return Check("numpy", OK, f"numpy {np.__version__} (torch.from_numpy round trip works)", details=details)


def check_optional(name: str, purpose: str) -> Check:
    try:
        module = importlib.import_module(name)
    except Exception as exc:
        return Check(name, INFO, f"{name} not installed ({purpose})", fix=f"pip install {name}",
                     details={"error": str(exc)[:300]})
    return Check(name, OK, f"{name} {getattr(module, '__version__', '?')}",
                 details={"version": getattr(module, "__version__", None)})
