"""attnc.BlockMask: an attention's block classification, made once (from
its mask and inputs on the GPU, or from FlexAttention-style lists) and
passed to any number of forward and backward calls of its shape."""

from __future__ import annotations

import ctypes
import itertools
import weakref
from array import array

from . import _lib

_vp, _sz, _i32 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int32


class _MaskShape(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int64) for name in
                ("batch", "heads", "seq_q", "seq_kv", "heads_kv")]


class _BlockLists(ctypes.Structure):
    _fields_ = [
        ("batch", ctypes.c_int64),
        ("heads", ctypes.c_int64),
        ("block_q", ctypes.c_int32),
        ("block_kv", ctypes.c_int32),
        ("kv_num_blocks", _vp),
        ("kv_num_blocks_len", _sz),
        ("kv_indices", _vp),
        ("kv_indices_len", _sz),
        ("full_kv_num_blocks", _vp),
        ("full_kv_num_blocks_len", _sz),
        ("full_kv_indices", _vp),
        ("full_kv_indices_len", _sz),
    ]


_make = _lib.declare("attnc_block_mask_make",
                     [_vp, _vp, _vp, _sz, _i32, _vp, _vp])
_refresh = _lib.declare("attnc_block_mask_refresh", [_vp, _vp, _vp, _sz, _vp])
_from_lists = _lib.declare("attnc_block_mask_from_lists",
                           [_vp, _vp, _vp, _i32, _vp])
_info = _lib.declare("attnc_block_mask_info", [_vp, _vp, _vp])
_release = _lib.declare("attnc_block_mask_release", [_vp], None)
_launches = _lib.declare("attnc_block_classify_launches", [_vp])


# Live block masks by id: attnc.torch's op takes a mask as this int (an
# op's schema holds no opaque object), and looks it up when it runs.
_live = {}
_ids = itertools.count(1)


def by_id(where, ident):
    """The live BlockMask of an id (0: none)."""
    if not ident:
        return None
    ref = _live.get(ident)
    mask = None if ref is None else ref()
    if mask is None:
        raise _lib.InvalidArgument(
            f"{where}: argument 'block_mask': the block mask of id {ident} "
            "no longer exists; a compiled graph or a pending backward that "
            "uses a mask needs it alive")
    return mask


def classify_launches() -> int:
    """How many block classifications this process has launched (calls
    given a BlockMask launch none)."""
    count = ctypes.c_uint64()
    _lib.check(_launches(ctypes.byref(count)))
    return count.value


class BlockMask:
    """A block mask of one Attention's mask for calls of one shape (C++
    attn::runtime::BlockMask). Made by Attention.make_block_mask or
    Attention.block_mask_from_lists; pass it as block_mask= to forward (and,
    made with for_backward=True, backward). It must stay alive until the
    calls that use it have run on their streams."""

    def __init__(self, handle):
        self._handle = handle
        shape, backward = _MaskShape(), ctypes.c_int32()
        _lib.check(_info(handle, ctypes.byref(shape), ctypes.byref(backward)))
        self.shape = (shape.batch, shape.heads, shape.seq_q, shape.seq_kv)
        self.for_backward = bool(backward.value)
        self._track()

    def _track(self):
        """Gives the mask its id (attnc.torch's op passes it as one)."""
        self.torch_id = ident = next(_ids)
        _live[ident] = weakref.ref(self, lambda _, i=ident: _live.pop(i, None))

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            _release(handle)

    def __repr__(self):
        b, h, sq, skv = self.shape
        return (f"attnc.BlockMask(batch={b}, heads={h}, seq_q={sq}, "
                f"seq_kv={skv}, for_backward={self.for_backward})")


def mask_handle(where, block_mask):
    """The C handle of a call's block_mask argument (None: no mask)."""
    if block_mask is None:
        return None
    if not isinstance(block_mask, BlockMask):
        raise _lib.InvalidArgument(
            f"{where}: argument 'block_mask': a {type(block_mask).__name__}; "
            "expected an attnc.BlockMask (Attention.make_block_mask)")
    return block_mask._handle


def _shape(batch, heads, seq_q, seq_kv, heads_kv):
    return _MaskShape(int(batch), int(heads), int(seq_q), int(seq_kv),
                      0 if heads_kv is None else int(heads_kv))


def make(att, where, batch, heads, seq_q, seq_kv, entries, for_backward,
         heads_kv, stream, at_inputs):
    """A BlockMask classified by att's kernels (entries: the packed
    attnc_input array at at_inputs)."""
    shape = _shape(batch, heads, seq_q, seq_kv, heads_kv)
    out = ctypes.c_void_p()
    _lib.check(_make(att._handle, ctypes.byref(shape), at_inputs,
                     len(entries), int(bool(for_backward)), stream,
                     ctypes.byref(out)))
    return BlockMask(out.value)


def refresh(att, where, block_mask, entries, stream, at_inputs):
    handle = mask_handle(where, block_mask)
    if handle is None:
        raise _lib.InvalidArgument(
            f"{where}: argument 'block_mask': None; expected an "
            "attnc.BlockMask")
    _lib.check(_refresh(att._handle, handle, at_inputs, len(entries),
                        stream))


def _flatten(where, name, value, rank):
    """value (a nested sequence, or an object with tolist(): a NumPy array
    or a torch tensor) as int32 values and its shape; rank dimensions."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    shape, level = [], [value]
    for _ in range(rank):
        if not all(isinstance(x, (list, tuple)) for x in level):
            raise _lib.InvalidArgument(
                f"{where}: argument '{name}': expected {rank} dimensions")
        sizes = {len(x) for x in level}
        if len(sizes) > 1:
            raise _lib.InvalidArgument(
                f"{where}: argument '{name}': ragged (rows of lengths "
                f"{sorted(sizes)})")
        shape.append(sizes.pop() if sizes else 0)
        level = [y for x in level for y in x]
    try:
        flat = array("i", (int(x) for x in level))
    except (TypeError, ValueError, OverflowError) as e:
        raise _lib.InvalidArgument(
            f"{where}: argument '{name}': not int32 values ({e})") from None
    return flat, shape


def from_lists(att, where, batch, heads, seq_q, seq_kv, kv_num_blocks,
               kv_indices, full_kv_num_blocks, full_kv_indices, block_q,
               block_kv, for_backward, heads_kv):
    """A BlockMask from FlexAttention-style lists: kv_num_blocks [B,H,QB],
    kv_indices [B,H,QB,KB] (B, H: the call's or 1), and optionally the
    full blocks' lists of the same shapes."""
    if (full_kv_num_blocks is None) != (full_kv_indices is None):
        raise _lib.InvalidArgument(
            f"{where}: arguments 'full_kv_num_blocks' and 'full_kv_indices':"
            " give both or neither")
    num, num_shape = _flatten(where, "kv_num_blocks", kv_num_blocks, 3)
    idx, _ = _flatten(where, "kv_indices", kv_indices, 4)
    full_num, full_idx = array("i"), array("i")
    if full_kv_num_blocks is not None:
        full_num, _ = _flatten(where, "full_kv_num_blocks",
                               full_kv_num_blocks, 3)
        full_idx, _ = _flatten(where, "full_kv_indices", full_kv_indices, 4)

    def at(a):
        return a.buffer_info()[0] if len(a) else None

    lists = _BlockLists(num_shape[0], num_shape[1], int(block_q),
                        int(block_kv), at(num), len(num), at(idx), len(idx),
                        at(full_num), len(full_num), at(full_idx),
                        len(full_idx))
    shape = _shape(batch, heads, seq_q, seq_kv, heads_kv)
    out = ctypes.c_void_p()
    _lib.check(_from_lists(att._handle, ctypes.byref(shape),
                           ctypes.byref(lists), int(bool(for_backward)),
                           ctypes.byref(out)))
    return BlockMask(out.value)
