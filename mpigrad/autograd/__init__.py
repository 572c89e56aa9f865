"""Reverse-mode automatic differentiation: the engine, grad modes, custom Functions, checks.

This face only hands names on: `backward`/`grad` live in backward.py, the engine in
engine.py, custom Functions in function.py, the checks in gradcheck.py.
"""
from . import forward_ad, functional  # noqa: F401
from .anomaly import detect_anomaly, is_anomaly_enabled, set_detect_anomaly  # noqa: F401
from .backward import backward, grad  # noqa: F401
from .engine import queue_callback  # noqa: F401
from .function import Function, FunctionCtx  # noqa: F401
from .grad_mode import (enable_grad, inference_mode, is_grad_enabled,  # noqa: F401
                        is_inference_mode_enabled, no_grad, set_grad_enabled)
from .gradcheck import gradcheck, gradgradcheck  # noqa: F401
from .graph import Node  # noqa: F401
from .variable import Variable  # noqa: F401
__all__ = ["backward", "grad", "Function", "FunctionCtx", "no_grad", "enable_grad",
           "set_grad_enabled", "is_grad_enabled", "inference_mode", "is_inference_mode_enabled",
           "detect_anomaly", "set_detect_anomaly",
           "queue_callback", "gradcheck", "gradgradcheck", "functional", "forward_ad", "Node"]
