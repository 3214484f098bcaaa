"""The OpSpec of every operator, as data: one module per family (copy, transfer, rope, quant).

Importing this package fills the registry of :mod:`ms_kvcache._spec` (``get_spec``, ``all_specs``)
without the wrappers of :mod:`ms_kvcache.ops` (and without MindSpore): ``import ms_kvcache`` imports
it first. The modules import only :mod:`ms_kvcache._spec` and :mod:`ms_kvcache._formats`; a wrapper in
``ms_kvcache/ops/<op>.py`` takes its op's spec from here (``SPEC``) and may attach the Python checks
MindSpore's infer step runs (:func:`ms_kvcache._spec.attach_checks`). docs/design.md, "Layers".
"""
from ms_kvcache._opspecs import copy, quant, rope, transfer  # noqa: F401  (each registers its family)

__all__ = ["copy", "transfer", "rope", "quant"]
