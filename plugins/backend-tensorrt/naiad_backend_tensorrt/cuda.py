"""A thin wrapper over NVIDIA's CUDA runtime binding (``cuda.bindings.runtime``).

Only what serving an engine needs: pick a device, allocate device memory, copy between host
and device on a stream, wait for the stream. Every call is checked: a failure raises an
INTERNAL error naming the call and CUDA's own error name and description. The binding is
imported by :meth:`Cuda.load`, never at module import.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from naiad.errors import InferenceServerError, Status, unavailable

CUDA_PACKAGE = "cuda-bindings"
"""The distribution that provides ``cuda.bindings`` (what ``cuda-python`` installs)."""


class Cuda:
    """The CUDA runtime API through ``cuda.bindings.runtime``, with error checking."""

    def __init__(self, runtime: Any) -> None:
        self.rt = runtime

    @classmethod
    def load(cls, model: str) -> Cuda:
        """Import the binding, or raise UNAVAILABLE naming the package to install."""
        try:
            from cuda.bindings import runtime
        except ImportError as exc:
            raise unavailable(
                f"model '{model}': the TensorRT backend needs NVIDIA's CUDA Python binding "
                f"(cuda.bindings), which cannot be imported ({exc}); install it with "
                f"'pip install {CUDA_PACKAGE}'") from exc
        return cls(runtime)

    def check(self, result: tuple[Any, ...], call: str) -> Any:
        """The value(s) of a binding call's ``(error, *values)`` result, or an error."""
        error, *values = result
        if error != self.rt.cudaError_t.cudaSuccess:
            raise InferenceServerError(f"CUDA call {call} failed: {self.describe(error)}",
                                       Status.INTERNAL)
        if not values:
            return None
        return values[0] if len(values) == 1 else tuple(values)

    def describe(self, error: Any) -> str:
        """``cudaErrorNoDevice (no CUDA-capable device is detected)``."""
        _, name = self.rt.cudaGetErrorName(error)
        _, text = self.rt.cudaGetErrorString(error)
        return f"{name.decode(errors='replace')} ({text.decode(errors='replace')})"

    # --- devices ------------------------------------------------------------------------

    def device_count(self) -> int:
        return int(self.check(self.rt.cudaGetDeviceCount(), "cudaGetDeviceCount()"))

    def set_device(self, device: int) -> None:
        """Make ``device`` current for the calling thread (CUDA keeps it per thread)."""
        self.check(self.rt.cudaSetDevice(device), f"cudaSetDevice({device})")

    def compute_capability(self, device: int) -> str:
        """``"8.6"``: the key of ``cc_model_filenames`` in config.pbtxt."""
        attr = self.rt.cudaDeviceAttr
        major = self.check(self.rt.cudaDeviceGetAttribute(
            attr.cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute(major)")
        minor = self.check(self.rt.cudaDeviceGetAttribute(
            attr.cudaDevAttrComputeCapabilityMinor, device), "cudaDeviceGetAttribute(minor)")
        return f"{major}.{minor}"

    # --- memory -------------------------------------------------------------------------

    def malloc(self, nbytes: int) -> int:
        """Device memory of ``nbytes`` bytes; its address as an int."""
        pointer = self.check(self.rt.cudaMalloc(nbytes), f"cudaMalloc({nbytes} bytes)")
        return int(pointer)

    def free(self, address: int) -> None:
        self.check(self.rt.cudaFree(address), "cudaFree")

    def copy_to_device(self, address: int, host: np.ndarray, stream: Any) -> None:
        """Queue a copy of the C-contiguous ``host`` array to ``address`` on ``stream``."""
        self.check(self.rt.cudaMemcpyAsync(
            address, host.ctypes.data, host.nbytes,
            self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice, stream),
            f"cudaMemcpyAsync(host to device, {host.nbytes} bytes)")

    def copy_to_host(self, host: np.ndarray, address: int, stream: Any) -> None:
        """Queue a copy from ``address`` into the C-contiguous ``host`` array."""
        self.check(self.rt.cudaMemcpyAsync(
            host.ctypes.data, address, host.nbytes,
            self.rt.cudaMemcpyKind.cudaMemcpyDeviceToHost, stream),
            f"cudaMemcpyAsync(device to host, {host.nbytes} bytes)")

    # --- streams ------------------------------------------------------------------------

    def create_stream(self) -> Any:
        """A non-blocking stream: TensorRT advises against the default stream."""
        return self.check(self.rt.cudaStreamCreateWithFlags(self.rt.cudaStreamNonBlocking),
                          "cudaStreamCreateWithFlags(cudaStreamNonBlocking)")

    def synchronize(self, stream: Any) -> None:
        self.check(self.rt.cudaStreamSynchronize(stream), "cudaStreamSynchronize")

    def destroy_stream(self, stream: Any) -> None:
        self.check(self.rt.cudaStreamDestroy(stream), "cudaStreamDestroy")

    @staticmethod
    def handle(stream: Any) -> int:
        """The stream's address, as TensorRT's ``execute_async_v3`` takes it."""
        try:
            from cuda.bindings.utils import get_cuda_native_handle
        except ImportError:  # cuda-bindings before get_cuda_native_handle
            return int(stream)
        return int(get_cuda_native_handle(stream))


class DeviceBuffer:
    """Device memory for one tensor, reused across batches and grown when a batch needs
    more (never shrunk, so steady traffic allocates nothing)."""

    def __init__(self, cuda: Cuda) -> None:
        self.cuda = cuda
        self.address = 0
        self.nbytes = 0

    def reserve(self, nbytes: int) -> int:
        """An address with room for ``nbytes`` (at least 1: TensorRT wants a real address
        even for an empty tensor)."""
        nbytes = max(nbytes, 1)
        if nbytes > self.nbytes:
            self.release()
            self.address = self.cuda.malloc(nbytes)
            self.nbytes = nbytes
        return self.address

    def release(self) -> None:
        if self.address:
            address, self.address, self.nbytes = self.address, 0, 0
            self.cuda.free(address)
