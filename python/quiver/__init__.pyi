"""Type stubs of the quiver package."""

from typing import Any, Dict, Optional, Tuple

from typing_extensions import Buffer

from . import _quiver
from ._quiver import (
    ActiveMessage as ActiveMessage,
    BufferTooSmall as BufferTooSmall,
    ConfigError as ConfigError,
    Connection as Connection,
    Corrupt as Corrupt,
    EndpointBusy as EndpointBusy,
    InHandler as InHandler,
    InvalidArgument as InvalidArgument,
    IoError as IoError,
    MessageTooLarge as MessageTooLarge,
    OutOfSharedMemory as OutOfSharedMemory,
    Peer as Peer,
    PeerClosed as PeerClosed,
    PeerDead as PeerDead,
    PeerStopped as PeerStopped,
    PermissionDenied as PermissionDenied,
    QuiverError as QuiverError,
    Refused as Refused,
    Request as Request,
    RmaError as RmaError,
    SendDeadlock as SendDeadlock,
    Timeout as Timeout,
    TransportUnavailable as TransportUnavailable,
    UnknownHandler as UnknownHandler,
    Unreachable as Unreachable,
    VersionMismatch as VersionMismatch,
    WouldBlock as WouldBlock,
    WrongKey as WrongKey,
)

__version__: str

class Endpoint(_quiver.Endpoint):
    async def recv_async(self) -> Tuple[bytes, Peer]: ...
    async def recv_into_async(self, buf: Buffer) -> Tuple[int, Peer]: ...
    async def recv_matching_async(
        self,
        tag: Optional[int] = None,
        *,
        mask: Optional[int] = None,
        source: Optional[Peer] = None,
    ) -> Tuple[bytes, Peer, int]: ...
    async def recv_into_matching_async(
        self,
        buf: Buffer,
        tag: Optional[int] = None,
        *,
        mask: Optional[int] = None,
        source: Optional[Peer] = None,
    ) -> Tuple[int, Peer, int]: ...

class Context:
    @classmethod
    def from_env(cls) -> "Context": ...
    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def job_id(self) -> int: ...
    def endpoint(self, port: int = 0) -> Endpoint: ...
    def stats(self) -> Dict[str, Any]: ...
