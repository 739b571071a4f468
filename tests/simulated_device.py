"""A simulated accelerator for CPU tests: tensors that say they live on another device, with CPU data.

Inside :class:`SimulatedDevice` (a ``TorchDispatchMode``), a :class:`OnDevice` tensor wraps a CPU
tensor but reports ``DEVICE`` (``meta``) as its device, so code that places tensors by the model's
device takes the same branches as on a GPU. Every aten op is checked as a CUDA kernel would check
it: an op whose tensor arguments mix the device with CPU tensors (other than 0-dim scalars) raises
:class:`DeviceMismatch`. Explicit transfers are allowed: ``.to(device)``, ``.cpu()``, ``copy_``,
``.tolist()``, ``.numpy()`` and ``.item()``. Factories called with ``device=DEVICE`` make device tensors.

``to_device(model)`` puts a model's parameters and buffers on the simulated device (ties kept).
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

DEVICE = torch.device("meta")
aten = torch.ops.aten
TRANSFERS = {aten._to_copy.default, aten.copy_.default, aten._local_scalar_dense.default, aten.to.device, aten.to.dtype_layout}
DATA_FACTORIES = (torch.tensor, torch.as_tensor, torch.asarray)
"""Factories from Python data: with a device they build the tensor without any op a dispatch mode sees."""


class DeviceMismatch(AssertionError):
    """An op received tensors on the simulated device and on the CPU."""


class OnDevice(torch.Tensor):
    """A tensor on the simulated device: reports ``DEVICE``, holds its data in ``self.data_cpu``."""

    @staticmethod
    def __new__(cls, data: torch.Tensor) -> "OnDevice":
        out = torch.Tensor._make_wrapper_subclass(
            cls, data.shape, strides=data.stride(), storage_offset=data.storage_offset(), dtype=data.dtype,
            device=DEVICE, requires_grad=data.requires_grad,
        )
        out.data_cpu = data
        return out

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError(f"{func} on a simulated-device tensor outside SimulatedDevice()")

    def __repr__(self) -> str:
        return f"OnDevice({self.data_cpu!r})"


def _unwrap(x):
    return x.data_cpu if isinstance(x, OnDevice) else x


def _is_device(value) -> bool:
    return value is not None and torch.device(value).type == DEVICE.type


def _redirect_devices(args: tuple, kwargs: dict) -> tuple[tuple, dict, torch.device | None]:
    """Replace device arguments (positional or keyword) naming ``DEVICE`` by the CPU; return the device asked for."""
    target = None

    def swap(value):
        nonlocal target
        if isinstance(value, (torch.device, str)) and not isinstance(value, bool):
            try:
                device = torch.device(value)
            except (RuntimeError, TypeError):
                return value
            target = device
            return torch.device("cpu") if device.type == DEVICE.type else device
        return value

    args = tuple(swap(a) for a in args)
    if kwargs.get("device") is not None:
        kwargs["device"] = swap(kwargs["device"])
    return args, kwargs, target


class _PythonLevel(TorchFunctionMode):
    """What no aten op shows: ``torch.tensor(data, device=DEVICE)`` and the like are built on the CPU,
    then moved (a visible op); ``tolist`` and ``numpy`` of a device tensor read its CPU data."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in DATA_FACTORIES and _is_device(kwargs.get("device")):
            return func(*args, **{**kwargs, "device": "cpu"}).to(DEVICE)
        if func in (torch.Tensor.tolist, torch.Tensor.numpy) and isinstance(args[0], OnDevice):
            return func(args[0].data_cpu, *args[1:], **kwargs)
        return func(*args, **kwargs)


class _Dispatch(TorchDispatchMode):
    """Runs every op on the CPU data of its arguments, checking device agreement as CUDA would."""

    def __init__(self) -> None:
        super().__init__()
        self.ops_on_device = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        flat, _ = tree_flatten((args, kwargs))
        if any(isinstance(t, torch.Tensor) and not isinstance(t, OnDevice) and t.device.type == DEVICE.type for t in flat):
            raise DeviceMismatch(f"{func}: a real {DEVICE} tensor (no data) escaped the simulation")
        on_device = any(isinstance(t, OnDevice) for t in flat)
        cpu = [t for t in flat if isinstance(t, torch.Tensor) and not isinstance(t, OnDevice) and t.dim() > 0]
        if on_device and cpu and func not in TRANSFERS:
            shapes = [tuple(t.shape) for t in cpu]
            raise DeviceMismatch(f"{func}: tensors on {DEVICE} and CPU tensors of shapes {shapes}")
        args, kwargs, target = _redirect_devices(args, kwargs)
        out = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
        if func is aten.copy_.default:
            return args[0]
        is_move = func.overloadpacket in (aten.to, aten._to_copy)
        wrap = _is_device(target) or (on_device and not (is_move and target is not None))
        if not wrap:
            return out
        self.ops_on_device += 1
        if func._schema.returns and func._schema.returns[0].alias_info is not None and func._schema.returns[0].alias_info.is_write:
            return args[0]  # in-place: the same tensor object comes back
        return tree_map(lambda t: OnDevice(t) if isinstance(t, torch.Tensor) and not isinstance(t, OnDevice) else t, out)


class SimulatedDevice:
    """Context manager: inside it, ``DEVICE`` is a simulated accelerator (see the module docstring).

    Attributes:
        ops_on_device: number of ops that ran on the simulated device (to show a test reached it).
    """

    def __init__(self) -> None:
        self._python, self._dispatch = _PythonLevel(), _Dispatch()

    @property
    def ops_on_device(self) -> int:
        return self._dispatch.ops_on_device

    def __enter__(self) -> "SimulatedDevice":
        self._python.__enter__()
        self._dispatch.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._dispatch.__exit__(*exc)
        self._python.__exit__(*exc)


def to_device(model: torch.nn.Module) -> torch.nn.Module:
    """Move ``model``'s parameters and buffers to the simulated device in place (call inside the mode)."""
    moved: dict[int, torch.nn.Parameter] = {}
    for module in model.modules():
        for name, param in module._parameters.items():
            if param is not None:
                if id(param) not in moved:
                    moved[id(param)] = torch.nn.Parameter(OnDevice(param.detach()), requires_grad=param.requires_grad)
                module._parameters[name] = moved[id(param)]
        for name, buffer in module._buffers.items():
            if buffer is not None:
                module._buffers[name] = OnDevice(buffer)
    return model
