"""Ready-made parametrizations: ``weight_norm``, ``spectral_norm`` and ``orthogonal``, as
``torch.nn.utils.parametrizations`` (same state_dict keys)."""
from enum import Enum, auto

import numpy as np

import ember

from ..._tensor import Tensor
from ...autograd.grad_mode import no_grad
from .. import functional as F
from ..modules.module import Module
from . import parametrize


def _norm_except_dim(v, p, dim):
    """The ``p``-norm over every dim but ``dim``, kept broadcastable against ``v``.
    NOTE: as torch's ``norm_except_dim``, ``dim=-1`` means the norm of the whole tensor."""
    if dim == -1:
        return v.norm(p)
    dims = [d for d in range(v.dim()) if d != dim]
    return v.norm(p, dim=dims, keepdim=True) if dims else v.abs()


def _weight_norm(v, g, dim):
    return v * (g / _norm_except_dim(v, 2, dim))


def _transposed_conv(module):
    from ..modules.conv import _ConvTransposeNd
    return isinstance(module, _ConvTransposeNd)


def _get_tensor(module, name):
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    return weight


class _WeightNorm(Module):
    def __init__(self, dim=0):
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g, weight_v):
        return _weight_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight):
        return _norm_except_dim(weight, 2, self.dim), weight


def weight_norm(module, name="weight", dim=0):
    """Reparametrize ``module.<name>`` as ``g * v / ||v||`` (norm over all dims but ``dim``),
    with ``g`` and ``v`` stored as ``parametrizations.<name>.original0`` / ``original1``.

    Example:
        >>> import ember
        >>> m = ember.nn.utils.parametrizations.weight_norm(ember.nn.Linear(20, 40))
        >>> m.parametrizations.weight.original0.shape, m.parametrizations.weight.original1.shape
        (torch.Size([40, 1]), torch.Size([40, 20]))
    """
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)

    def load_legacy_keys(state_dict, prefix, *args):
        # Checkpoints saved with the old nn.utils.weight_norm name the tensors <name>_g/_v.
        g_key, v_key = f"{prefix}{name}_g", f"{prefix}{name}_v"
        if g_key in state_dict and v_key in state_dict:
            state_dict[f"{prefix}parametrizations.{name}.original0"] = state_dict.pop(g_key)
            state_dict[f"{prefix}parametrizations.{name}.original1"] = state_dict.pop(v_key)

    module._register_load_state_dict_pre_hook(load_legacy_keys)
    return module


def _weight_matrix(weight, dim):
    """``weight`` as a matrix whose rows index ``dim``: what spectral norm normalizes."""
    if dim != 0:
        weight = weight.permute(dim, *(d for d in range(weight.dim()) if d != dim))
    return weight.flatten(1)


def _normalized_randn(n, like, eps):
    return F.normalize(like.new_empty(n).normal_(0, 1), dim=0, eps=eps)


class _SpectralNorm(Module):
    def __init__(self, weight, n_power_iterations=1, dim=0, eps=1e-12):
        super().__init__()
        ndim = weight.dim()
        if dim >= ndim or dim < -ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [-{ndim}, "
                             f"{ndim - 1}] but got {dim})")
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            mat = _weight_matrix(weight, self.dim)
            h, w = mat.shape
            self.register_buffer("_u", _normalized_randn(h, mat, eps))
            self.register_buffer("_v", _normalized_randn(w, mat, eps))
            # NOTE: torch starts from 15 iterations so sigma is accurate from the first call.
            self._power_method(mat, 15)

    @no_grad()
    def _power_method(self, mat, n_power_iterations):
        # u and v are updated in place: they are buffers, and the state_dict shares them.
        for _ in range(n_power_iterations):
            self._u.copy_(F.normalize(ember.mv(mat, self._v), dim=0, eps=self.eps))
            self._v.copy_(F.normalize(ember.mv(mat.mH, self._u), dim=0, eps=self.eps))

    def forward(self, weight):
        if weight.dim() == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        mat = _weight_matrix(weight, self.dim)
        if self.training:
            self._power_method(mat, self.n_power_iterations)
        u, v = self._u.clone(), self._v.clone()
        sigma = (u.conj() * ember.mv(mat, v)).sum()
        return weight / sigma

    def right_inverse(self, value):
        return value


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """Divide ``module.<name>`` by its largest singular value, estimated by power iteration
    (vectors kept as buffers ``parametrizations.<name>.0._u`` / ``_v``; updated in training).

    Args:
        n_power_iterations (int): iterations per forward in training mode. Default: 1.
        eps (float): for numerical stability in normalizing. Default: 1e-12.
        dim (int, optional): the output-channel dim; 1 for ConvTranspose, else 0.

    Example:
        >>> import ember
        >>> m = ember.nn.utils.parametrizations.spectral_norm(ember.nn.Linear(20, 40))
        >>> list(m.state_dict())
        ['bias', 'parametrizations.weight.original', 'parametrizations.weight.0._u', \
'parametrizations.weight.0._v']
    """
    weight = _get_tensor(module, name)
    if dim is None:
        dim = 1 if _transposed_conv(module) else 0
    parametrize.register_parametrization(
        module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))
    return module


# ---- orthogonal -------------------------------------------------------------------------------

class _OrthMaps(Enum):
    matrix_exp = auto()
    cayley = auto()
    householder = auto()


def _make_orthogonal(a):
    """The Q of a QR decomposition of ``a`` with diag(R) > 0 (so it is unique)."""
    q, r = np.linalg.qr(a.detach().cpu().numpy())
    d = np.diagonal(r, axis1=-2, axis2=-1)
    sign = np.where(d == 0, 1, d / np.where(d == 0, 1, np.abs(d)))
    return ember.tensor(q * sign[..., None, :], dtype=a.dtype, device=a.device)


def _geqrf(a):
    """LAPACK's geqrf of ``a`` (no gradient): R above the diagonal, the Householder vectors
    below it, and their scales ``tau``."""
    x = a.detach().cpu().numpy()
    h, tau = zip(*(np.linalg.qr(m, mode="raw") for m in x.reshape(-1, *x.shape[-2:])))
    # numpy returns LAPACK's Fortran-order array, i.e. the transpose.
    h = np.stack(h).swapaxes(-1, -2).reshape(x.shape)
    tau = np.stack(tau).reshape(*x.shape[:-2], -1)
    kw = dict(dtype=a.dtype, device=a.device)
    return ember.tensor(h, **kw), ember.tensor(tau, **kw)


def _is_orthogonal(q):
    n, k = q.shape[-2], q.shape[-1]
    eye = ember.eye(k, dtype=q.dtype, device=q.device)
    eps = 10 * n * ember.finfo(q.dtype).eps
    # torch.allclose(q^H q, I, atol=eps) with its default rtol=1e-5
    return bool(((q.mH @ q) - eye).abs().le(eps + 1e-5 * eye).all())


class _Orthogonal(Module):
    def __init__(self, weight, orthogonal_map, *, use_trivialization=True):
        super().__init__()
        if weight.is_complex() and orthogonal_map == _OrthMaps.householder:
            raise ValueError("The householder parametrization does not support complex tensors.")
        self.shape = weight.shape
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X):
        n, k = X.shape[-2], X.shape[-1]
        transposed = n < k
        if transposed:
            X, n, k = X.mT, k, n
        if self.orthogonal_map == _OrthMaps.householder:
            A = X.tril(-1)
            tau = 2.0 / (1.0 + (A * A).sum(-2))
            Q = ember.linalg.householder_product(A, tau)
            # The diagonal of X holds the signs +-1; torch casts it to int so no gradient
            # flows into it.
            Q = Q * X.diagonal(dim1=-2, dim2=-1).int().unsqueeze(-2)
        else:
            X = X.tril()
            if n != k:
                X = ember.cat([X, X.new_zeros(n, n - k).expand(*X.shape[:-2], -1, -1)], -1)
            A = X - X.mH
            if self.orthogonal_map == _OrthMaps.matrix_exp:
                Q = ember.linalg.matrix_exp(A)
            else:       # Cayley: (I - A/2)^-1 (I + A/2)
                eye = ember.eye(n, dtype=A.dtype, device=A.device)
                Q = ember.linalg.solve(eye - A * 0.5, eye + A * 0.5)
            if n != k:
                Q = Q[..., :k]
        if getattr(self, "base", None) is not None:
            Q = self.base @ Q
        return Q.mT if transposed else Q

    @no_grad()
    def right_inverse(self, Q):
        if Q.shape != self.shape:
            raise ValueError(f"Expected a matrix or batch of matrices of shape {self.shape}. "
                             f"Got a tensor of shape {Q.shape}.")
        Q_init = Q
        n, k = Q.shape[-2], Q.shape[-1]
        if n < k:
            Q, n, k = Q.mT, k, n
        if "base" not in self._buffers:
            if self.orthogonal_map != _OrthMaps.householder:
                raise NotImplementedError("It is not possible to assign to the matrix "
                                          "exponential or the Cayley parametrizations when "
                                          "use_trivialization=False.")
            # Q = H_1...H_k with diag(R) > 0: keep the reflectors, put the signs of R on the
            # diagonal (flipped where LAPACK skipped a reflection, tau == 0).
            A, tau = _geqrf(Q)
            d = A.diagonal(dim1=-2, dim2=-1)
            d.copy_(d.sign() * ember.where(tau == 0, -1.0, 1.0).to(d.dtype))
            return A.mT if Q is not Q_init else A
        if n == k:
            Q = Q.clone() if _is_orthogonal(Q) else _make_orthogonal(Q)
        else:
            # Complete Q to a full n x n orthogonal matrix.
            N = ember.randn(*Q.shape[:-2], n, n - k, dtype=Q.dtype, device=Q.device)
            Q = _make_orthogonal(ember.cat([Q, N], -1))
        self.base = Q
        # NOTE: torch returns -Id: with it the householder map of the original is Id too.
        neg_id = ember.zeros_like(Q_init)
        neg_id.diagonal(dim1=-2, dim2=-1).fill_(-1.0)
        return neg_id


def orthogonal(module, name="weight", orthogonal_map=None, *, use_trivialization=True):
    """Keep ``module.<name>`` orthogonal (or unitary): ``Q^H Q = I``. ``orthogonal_map`` is
    ``"matrix_exp"`` (default for square or complex), ``"householder"`` (default otherwise) or
    ``"cayley"``. See
    https://pytorch.org/docs/stable/generated/torch.nn.utils.parametrizations.orthogonal.html

    Example:
        >>> import ember
        >>> m = ember.nn.utils.parametrizations.orthogonal(ember.nn.Linear(4, 4))
        >>> bool(((m.weight.mT @ m.weight) - ember.eye(4)).abs().max() < 1e-5)
        True
    """
    weight = _get_tensor(module, name)
    if weight.dim() < 2:
        raise ValueError("Expected a matrix or batch of matrices. Got a tensor of "
                         f"{weight.dim()} dimensions.")
    n, k = weight.shape[-2], weight.shape[-1]
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if n == k or weight.is_complex() else "householder"
    orth_enum = getattr(_OrthMaps, orthogonal_map, None)
    if orth_enum is None:
        raise ValueError('orthogonal_map has to be one of "matrix_exp", "cayley", '
                         f'"householder". Got: {orthogonal_map}')
    orth = _Orthogonal(weight, orth_enum, use_trivialization=use_trivialization)
    parametrize.register_parametrization(module, name, orth, unsafe=True)
    return module
