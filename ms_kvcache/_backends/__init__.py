"""One module per backend. Each provides:

- ``available() -> (bool, str)``: whether the backend can run here and, if not, why.
- ``aot_func(spec) -> (func, reg_info)``: what ``ops.Custom`` needs to call op ``spec``
  (``"<path to .so>:<OpType>"`` with ``reg_info=None`` for the CPU AOT loader, or the OpType name plus
  a ``CustomRegOp`` registration for Ascend).
"""
