"""Pure-Python client of the gradient aggregation protocol (UDP carriage), and a TCP ring
AllReduce baseline. See client/python/README.md."""

from .client import (
    AllreduceTimeout,
    Client,
    GradientError,
    NakError,
    SocketError,
    UnreachableError,
)
from .config import Collective, ConfigError, Endpoint, load_endpoint
from .lanes import bf16_to_f32, f32_to_bf16
from .native import NativeClient, client_class, native_available
from .ring import Ring, RingError, ring_allreduce
from .wire import Header

__all__ = [
    "AllreduceTimeout",
    "Client",
    "Collective",
    "ConfigError",
    "Endpoint",
    "GradientError",
    "Header",
    "NakError",
    "NativeClient",
    "Ring",
    "RingError",
    "UnreachableError",
    "bf16_to_f32",
    "client_class",
    "f32_to_bf16",
    "load_endpoint",
    "native_available",
    "ring_allreduce",
]
