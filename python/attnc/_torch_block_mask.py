"""attnc.torch.create_block_mask: an attnc.BlockMask made once from
tensors' shapes, for any number of attnc.torch.attention calls."""

from typing import Optional

from . import _torch_args
from .torch import (_current_device, _heads, _object_for, _on_device, _rows,
                    _stream, register)


def create_block_mask(definition, q, k, v=None, inputs: Optional[dict] = None,
                      layout: Optional[str] = None, for_backward: bool = True,
                      lists: Optional[dict] = None):
    """An attnc.BlockMask for attention(q, k, v, definition, block_mask=...)
    calls of q's and k's shape, dtype and head dims (v: k when None): the
    definition's mask classified on the GPU with inputs (on the current
    stream), or, given lists (block_mask_from_lists' keyword arguments:
    kv_num_blocks, kv_indices, ...), FlexAttention's lists. Made once,
    passed to any number of calls (every layer of a model)."""
    where = "attnc.torch.create_block_mask"
    layout = _torch_args.check_call(where, layout, None, None, None, None,
                                    None)
    v = k if v is None else v
    att = _object_for(q, v, register(definition), layout)
    index = q.get_device()
    if index != _current_device():
        with _on_device(index):  # the mask's memory: on q's device
            return create_block_mask(definition, q, k, v, inputs, layout,
                                     for_backward, lists)
    b, h, sq = _rows(q, layout)
    sk = k.shape[2] if layout == "bhsd" else k.shape[1]
    hk = _heads(k, layout)
    if lists is not None:
        return att.block_mask_from_lists(b, h, sq, sk,
                                         for_backward=for_backward,
                                         heads_kv=hk, **lists)
    return att.make_block_mask(b, h, sq, sk, inputs=inputs,
                               for_backward=for_backward, heads_kv=hk,
                               stream=_stream(q))
