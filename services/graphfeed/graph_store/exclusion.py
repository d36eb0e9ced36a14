"""Excluding edges from one-hop sampling (DGL's ``exclude_eids``): the sampling kernels' view of
an exclusion and the compiled tests they make per row and per edge
(:mod:`graphfeed.graph_store.sampling`).

The rows that hold excluded edges are a link-prediction minibatch's seed endpoints, hubs among
them, and every hop samples them again, so the per-edge test must be cheap: a flag per low
bits of the edge id rules out nearly every edge before a binary search.
"""

from __future__ import annotations

import numba
import numpy as np

LocalExclusion = tuple[np.ndarray, np.ndarray]
"""Edges a sample leaves out: ``(local rows holding one, edge ids)``, int64, ascending, unique."""

_ROW_FILTER = 1 << 16  # flags of excluded rows (and edge ids) by their low bits (64 KiB, cache-resident)
_jit = numba.njit(cache=True, nogil=True, boundscheck=False)


@_jit
def _contains(sorted_ids, v):  # noqa: ANN001, ANN202
    """Whether ``v`` is in the ascending ``sorted_ids`` (exclusion sets are small: a binary search)."""
    k = np.searchsorted(sorted_ids, v)
    return k < len(sorted_ids) and sorted_ids[k] == v


@_jit
def holds_excluded(xfilter, xrows, r):  # noqa: ANN001, ANN201
    """Whether row ``r`` is in ``xrows``: most rows are ruled out by one look-up in ``xfilter``
    (a few thousand rows flag a few % of it), so few pay the binary search (which alone made a
    1M-row call with 5000 excluded edges about 1.6x slower than one without)."""
    return xfilter[r & (len(xfilter) - 1)] and _contains(xrows, r)


@_jit
def kept(indices, edge_ids, begin, end, xeids, efilter, gather, ind_out, eid_out):  # noqa: ANN001, ANN201
    """How many edges of CSR positions ``[begin, end)`` have an id not in ``xeids``; with
    ``gather``, those edges are also copied (in CSR order) to ``ind_out``/``eid_out``. Most ids
    are ruled out by one look-up in ``efilter`` (flags by low bits): the rows holding excluded
    edges are the seeds' endpoints, hubs among them, and a binary search per edge of a hub's
    list made exclusion cost 4x the sample itself (0.15 CPU-s per minibatch per graph-store)."""
    m = 0
    mask = len(efilter) - 1
    for q in range(begin, end):
        e = edge_ids[q]
        if not (efilter[e & mask] and _contains(xeids, e)):
            if gather:
                ind_out[m] = indices[q]
                eid_out[m] = edge_ids[q]
            m += 1
    return m


def kernel_exclusion(
    indptr: np.ndarray, indices: np.ndarray, edge_ids: np.ndarray, exclude: LocalExclusion | None
) -> tuple[np.ndarray, ...] | None:
    """The kernels' view of ``exclude``: ``(xrows, xeids, x_ind, x_eid, xfilter, efilter)``:
    ``x_ind`` and ``x_eid`` room for the longest kept list of an excluded row, of ``indices``' and
    ``edge_ids``' dtypes (the kernel reads either through one variable), ``xfilter`` and
    ``efilter`` the rows' and the edge ids' flags by low bits (:func:`holds_excluded`,
    :func:`kept`); None when nothing is excluded."""
    if exclude is None:
        return None
    xrows, xeids = (np.asarray(a) for a in exclude)
    for name, a in (("rows", xrows), ("edge ids", xeids)):
        if a.dtype != np.int64 or a.ndim != 1 or (len(a) > 1 and not (a[1:] > a[:-1]).all()):
            raise ValueError(f"excluded {name} must be 1-D int64, ascending and unique, got {a.dtype} {a.shape}")
    if not len(xrows) or not len(xeids):
        return None
    room = int((indptr[xrows + 1] - indptr[xrows]).max())
    xfilter = np.zeros(_ROW_FILTER, dtype=np.bool_)
    xfilter[xrows & (_ROW_FILTER - 1)] = True
    efilter = np.zeros(_ROW_FILTER, dtype=np.bool_)
    efilter[xeids & (_ROW_FILTER - 1)] = True
    x_ind, x_eid = np.empty(room, dtype=indices.dtype), np.empty(room, dtype=edge_ids.dtype)
    return xrows, xeids, x_ind, x_eid, xfilter, efilter
