"""Multivariate distributions: MultivariateNormal, LowRankMultivariateNormal, Dirichlet,
LogisticNormal, Wishart and LKJCholesky."""
import math
import warnings
from numbers import Number

import ember
from . import constraints
from .compound import TransformedDistribution
from .continuous import Beta, Chi2, Normal, _check
from .distribution import Distribution, ExponentialFamily
from .transforms import StickBreakingTransform
from .utils import broadcast_all, lazy_property

__all__ = ["Dirichlet", "LKJCholesky", "LogisticNormal", "LowRankMultivariateNormal",
           "MultivariateNormal", "Wishart"]


def _batch_mv(bmat, bvec):
    """Matrix-vector products over broadcast batch dims."""
    return ember.matmul(bmat, bvec.unsqueeze(-1)).squeeze(-1)


def _batch_mahalanobis(bL, bx):
    """The squared Mahalanobis distance ``x^T (L L^T)^-1 x`` for lower-triangular ``bL``,
    whose batch dims must broadcast with ``bx``'s: ``bx`` is reshaped so that one triangular
    solve covers every right-hand side of each ``L`` (no copies of ``L``)."""
    n = bx.size(-1)
    bx_batch_shape = bx.shape[:-1]
    bL_batch_dims = bL.dim() - 2
    outer_batch_dims = bx.dim() - 1 - bL_batch_dims
    old_batch_dims = outer_batch_dims + bL_batch_dims
    new_batch_dims = outer_batch_dims + 2 * bL_batch_dims
    # split bx's batch dims matching L's into (broadcast, L's) pairs
    bx_new_shape = tuple(bx.shape[:outer_batch_dims])
    for sL, sx in zip(bL.shape[:-2], bx.shape[outer_batch_dims:-1]):
        bx_new_shape += (sx // sL, sL)
    bx = bx.reshape(bx_new_shape + (n,))
    permute_dims = (list(range(outer_batch_dims)) +
                    list(range(outer_batch_dims, new_batch_dims, 2)) +
                    list(range(outer_batch_dims + 1, new_batch_dims, 2)) + [new_batch_dims])
    bx = bx.permute(permute_dims)
    flat_L = bL.reshape(-1, n, n)
    flat_x_swap = bx.reshape(-1, flat_L.size(0), n).permute(1, 2, 0)
    M = ember.linalg.solve_triangular(flat_L, flat_x_swap, upper=False).pow(2).sum(-2).t()
    permuted_M = M.reshape(bx.shape[:-1])
    permute_inv_dims = list(range(outer_batch_dims))
    for i in range(bL_batch_dims):
        permute_inv_dims += [outer_batch_dims + i, old_batch_dims + i]
    return permuted_M.permute(permute_inv_dims).reshape(bx_batch_shape)


def _precision_to_scale_tril(P):
    """The lower Cholesky factor of ``P^-1`` without inverting ``P``: from the Cholesky
    factor of ``P`` with rows and columns reversed."""
    Lf = ember.linalg.cholesky(ember.flip(P, (-2, -1)))
    L_inv = ember.transpose(ember.flip(Lf, (-2, -1)), -2, -1)
    Id = ember.eye(P.shape[-1], dtype=P.dtype, device=P.device)
    return ember.linalg.solve_triangular(L_inv, Id, upper=False)


def _one_matrix(dist, kinds, given, vector_shape):
    """Set the one given matrix parameter (of ``kinds``) broadcast against ``vector_shape``'s
    batch; return (its name, the matrix, the batch shape)."""
    if sum(m is not None for m in given) != 1:
        raise ValueError("Exactly one of covariance_matrix or precision_matrix or scale_tril "
                         "may be specified.")
    name, m = next((k, m) for k, m in zip(kinds, given) if m is not None)
    if m.dim() < 2:
        what = "scale_tril matrix" if name == "scale_tril" else name
        raise ValueError(f"{what} must be at least two-dimensional, with optional leading "
                         "batch dimensions")
    batch_shape = ember.broadcast_shapes(m.shape[:-2], vector_shape)
    setattr(dist, name, m.expand(batch_shape + (-1, -1)))
    return name, m, batch_shape


def _scale_tril_of(name, m):
    if name == "scale_tril":
        return m
    return ember.linalg.cholesky(m) if name == "covariance_matrix" else _precision_to_scale_tril(m)


_MATRICES = ("covariance_matrix", "precision_matrix", "scale_tril")


class _ScaleTril:
    """The matrix parameters of a distribution held as one unbroadcast Cholesky factor
    ``_unbroadcasted_scale_tril``; the others are made on first use."""
    _unexpanded = ("_unbroadcasted_scale_tril",)

    def _matrix_shape(self):
        return self._batch_shape + (self._unbroadcasted_scale_tril.shape[-1],) * 2

    @lazy_property
    def scale_tril(self):
        return self._unbroadcasted_scale_tril.expand(self._matrix_shape())

    @lazy_property
    def covariance_matrix(self):
        L = self._unbroadcasted_scale_tril
        return ember.matmul(L, L.mT).expand(self._matrix_shape())

    @lazy_property
    def precision_matrix(self):
        return ember.cholesky_inverse(self._unbroadcasted_scale_tril).expand(self._matrix_shape())

    def _half_log_det(self):
        return self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)


class MultivariateNormal(_ScaleTril, Distribution):
    """The multivariate normal distribution with mean ``loc`` and one of
    ``covariance_matrix``, ``precision_matrix`` or ``scale_tril`` (its lower Cholesky
    factor, the cheapest).

    Example:
        >>> from ember.distributions import MultivariateNormal
        >>> d = MultivariateNormal(ember.zeros(2), ember.eye(2))
        >>> d.log_prob(ember.zeros(2)), d.entropy(), d.rsample((3,)).shape
        (tensor(-1.8379), tensor(2.8379), torch.Size([3, 2]))
    """
    arg_constraints = {"loc": constraints.real_vector,
                       "covariance_matrix": constraints.positive_definite,
                       "precision_matrix": constraints.positive_definite,
                       "scale_tril": constraints.lower_cholesky}
    support, has_rsample = constraints.real_vector, True

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None,
                 validate_args=None):
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        name, m, batch_shape = _one_matrix(
            self, _MATRICES, (covariance_matrix, precision_matrix, scale_tril), loc.shape[:-1])
        self.loc = loc.expand(batch_shape + (-1,))
        super().__init__(batch_shape, self.loc.shape[-1:], validate_args=validate_args)
        self._unbroadcasted_scale_tril = _scale_tril_of(name, m)

    mean = property(lambda self: self.loc)
    mode = property(lambda self: self.loc)
    variance = property(lambda self: self._unbroadcasted_scale_tril.pow(2).sum(-1).expand(
        self._batch_shape + self._event_shape))

    def rsample(self, sample_shape=ember.Size()):
        eps = ember.randn(self._extended_shape(sample_shape), dtype=self.loc.dtype,
                          device=self.loc.device)
        return self.loc + _batch_mv(self._unbroadcasted_scale_tril, eps)

    def log_prob(self, value):
        _check(self, value)
        M = _batch_mahalanobis(self._unbroadcasted_scale_tril, value - self.loc)
        return -0.5 * (self._event_shape[0] * math.log(2 * math.pi) + M) - self._half_log_det()

    def entropy(self):
        H = 0.5 * self._event_shape[0] * (1.0 + math.log(2 * math.pi)) + self._half_log_det()
        return H.expand(self._batch_shape) if len(self._batch_shape) else H


def _batch_capacitance_tril(W, D):
    """The Cholesky factor of ``I + W^T D^-1 W``."""
    m = W.size(-1)
    K = ember.matmul(W.mT / D.unsqueeze(-2), W)
    return ember.linalg.cholesky(K + ember.eye(m, dtype=K.dtype, device=K.device))


def _batch_lowrank_logdet(W, D, capacitance_tril):
    """``log det(W W^T + D)`` by the matrix determinant lemma."""
    return 2 * capacitance_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1) + D.log().sum(-1)


def _batch_lowrank_mahalanobis(W, D, x, capacitance_tril):
    """``x^T (W W^T + D)^-1 x`` by the Woodbury identity."""
    Wt_Dinv_x = _batch_mv(W.mT / D.unsqueeze(-2), x)
    return (x.pow(2) / D).sum(-1) - _batch_mahalanobis(capacitance_tril, Wt_Dinv_x)


class LowRankMultivariateNormal(Distribution):
    """A multivariate normal whose covariance is low rank plus diagonal,
    ``cov_factor @ cov_factor.T + diag(cov_diag)``: log_prob costs O(n m^2), not O(n^3).

    Example:
        >>> from ember.distributions import LowRankMultivariateNormal
        >>> d = LowRankMultivariateNormal(ember.zeros(2), ember.tensor([[1.], [0.]]),
        ...                               ember.ones(2))
        >>> d.covariance_matrix, d.log_prob(ember.zeros(2))
        (tensor([[2., 0.],
                [0., 1.]]), tensor(-2.1845))
    """
    arg_constraints = {"loc": constraints.real_vector,
                       "cov_factor": constraints.independent(constraints.real, 2),
                       "cov_diag": constraints.independent(constraints.positive, 1)}
    support, has_rsample = constraints.real_vector, True
    _unexpanded = ("_unbroadcasted_cov_factor", "_unbroadcasted_cov_diag", "_capacitance_tril")

    def __init__(self, loc, cov_factor, cov_diag, validate_args=None):
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        event_shape = loc.shape[-1:]
        if cov_factor.dim() < 2:
            raise ValueError("cov_factor must be at least two-dimensional, with optional "
                             "leading batch dimensions")
        if cov_factor.shape[-2:-1] != event_shape:
            raise ValueError(f"cov_factor must be a batch of matrices with shape "
                             f"{event_shape[0]} x m")
        if cov_diag.shape[-1:] != event_shape:
            raise ValueError(f"cov_diag must be a batch of vectors with shape {event_shape}")
        try:
            loc_, self.cov_factor, cov_diag_ = ember.broadcast_tensors(
                loc.unsqueeze(-1), cov_factor, cov_diag.unsqueeze(-1))
        except RuntimeError as e:
            raise ValueError(f"Incompatible batch shapes: loc {loc.shape}, cov_factor "
                             f"{cov_factor.shape}, cov_diag {cov_diag.shape}") from e
        self.loc, self.cov_diag = loc_[..., 0], cov_diag_[..., 0]
        self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag = cov_factor, cov_diag
        self._capacitance_tril = _batch_capacitance_tril(cov_factor, cov_diag)
        super().__init__(self.loc.shape[:-1], event_shape, validate_args=validate_args)

    mean = property(lambda self: self.loc)
    mode = property(lambda self: self.loc)

    def _matrix_shape(self):
        return self._batch_shape + self._event_shape + self._event_shape

    @lazy_property
    def variance(self):
        return (self._unbroadcasted_cov_factor.pow(2).sum(-1) +
                self._unbroadcasted_cov_diag).expand(self._batch_shape + self._event_shape)

    @lazy_property
    def scale_tril(self):
        # the Cholesky factor of D^1/2 (I + D^-1/2 W W^T D^-1/2) D^1/2, well conditioned
        n = self._event_shape[0]
        d_sqrt = self._unbroadcasted_cov_diag.sqrt().unsqueeze(-1)
        Dinvsqrt_W = self._unbroadcasted_cov_factor / d_sqrt
        K = ember.matmul(Dinvsqrt_W, Dinvsqrt_W.mT) + ember.eye(n, dtype=d_sqrt.dtype,
                                                               device=d_sqrt.device)
        return (d_sqrt * ember.linalg.cholesky(K)).expand(self._matrix_shape())

    @lazy_property
    def covariance_matrix(self):
        W = self._unbroadcasted_cov_factor
        return (ember.matmul(W, W.mT) + ember.diag_embed(self._unbroadcasted_cov_diag)).expand(
            self._matrix_shape())

    @lazy_property
    def precision_matrix(self):
        # Woodbury: D^-1 - D^-1 W (I + W^T D^-1 W)^-1 W^T D^-1
        Wt_Dinv = self._unbroadcasted_cov_factor.mT / self._unbroadcasted_cov_diag.unsqueeze(-2)
        A = ember.linalg.solve_triangular(self._capacitance_tril, Wt_Dinv, upper=False)
        return (ember.diag_embed(self._unbroadcasted_cov_diag.reciprocal()) - A.mT @ A).expand(
            self._matrix_shape())

    def rsample(self, sample_shape=ember.Size()):
        shape = self._extended_shape(sample_shape)
        eps_W = ember.randn(shape[:-1] + self.cov_factor.shape[-1:], dtype=self.loc.dtype,
                            device=self.loc.device)
        eps_D = ember.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + _batch_mv(self._unbroadcasted_cov_factor, eps_W) + \
            self._unbroadcasted_cov_diag.sqrt() * eps_D

    def _log_det(self):
        return _batch_lowrank_logdet(self._unbroadcasted_cov_factor,
                                     self._unbroadcasted_cov_diag, self._capacitance_tril)

    def log_prob(self, value):
        _check(self, value)
        M = _batch_lowrank_mahalanobis(self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag,
                                       value - self.loc, self._capacitance_tril)
        return -0.5 * (self._event_shape[0] * math.log(2 * math.pi) + self._log_det() + M)

    def entropy(self):
        H = 0.5 * (self._event_shape[0] * (1.0 + math.log(2 * math.pi)) + self._log_det())
        return H.expand(self._batch_shape) if len(self._batch_shape) else H


class Dirichlet(ExponentialFamily):
    """The Dirichlet distribution on the simplex with ``concentration`` (last dim). Samples
    are normalised Gamma draws, so ``rsample`` differentiates through each draw's implicit
    reparameterisation.

    Example:
        >>> from ember.distributions import Dirichlet
        >>> d = Dirichlet(ember.tensor([1., 2., 3.]))
        >>> d.mean, d.log_prob(ember.tensor([0.2, 0.3, 0.5]))
        (tensor([0.1667, 0.3333, 0.5000]), tensor(1.5041))
    """
    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support, has_rsample = constraints.simplex, True

    def __init__(self, concentration, validate_args=None):
        if concentration.dim() < 1:
            raise ValueError("`concentration` parameter must be at least one-dimensional.")
        self.concentration = concentration
        super().__init__(concentration.shape[:-1], concentration.shape[-1:],
                         validate_args=validate_args)

    def rsample(self, sample_shape=()):
        c = self.concentration.expand(self._extended_shape(sample_shape))
        g = ember._standard_gamma(c).clamp(min=ember.finfo(c.dtype).tiny)
        return g / g.sum(-1, keepdim=True)

    def log_prob(self, value):
        _check(self, value)
        c = self.concentration
        return ember.xlogy(c - 1.0, value).sum(-1) + ember.lgamma(c.sum(-1)) - \
            ember.lgamma(c).sum(-1)

    mean = property(lambda self: self.concentration / self.concentration.sum(-1, True))

    @property
    def mode(self):
        cm1 = (self.concentration - 1).clamp(min=0.0)
        mode = cm1 / cm1.sum(-1, True)
        # where every concentration is below one, the mode is the vertex of the largest
        vertex = ember.nn.functional.one_hot(mode.argmax(dim=-1), cm1.shape[-1]).to(mode)
        return ember.where((self.concentration < 1).all(dim=-1, keepdim=True), vertex, mode)

    @property
    def variance(self):
        con0 = self.concentration.sum(-1, True)
        return self.concentration * (con0 - self.concentration) / (con0.pow(2) * (con0 + 1))

    def entropy(self):
        c = self.concentration
        k, a0 = c.size(-1), c.sum(-1)
        return ember.lgamma(c).sum(-1) - ember.lgamma(a0) - (k - a0) * ember.digamma(a0) - (
            (c - 1.0) * ember.digamma(c)).sum(-1)

    _natural_params = property(lambda self: (self.concentration,))

    def _log_normalizer(self, x):
        return x.lgamma().sum(-1) - ember.lgamma(x.sum(-1))


class LogisticNormal(TransformedDistribution):
    """The logistic-normal distribution on the simplex: a normal vector pushed through
    ``StickBreakingTransform`` (``K - 1`` parameters give ``K`` coordinates).

    Example:
        >>> from ember.distributions import LogisticNormal
        >>> d = LogisticNormal(ember.zeros(2), ember.ones(2))
        >>> d.sample().shape, d.log_prob(ember.tensor([0.2, 0.3, 0.5]))
        (torch.Size([3]), tensor(1.2980))
    """
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support, has_rsample = constraints.simplex, True

    def __init__(self, loc, scale, validate_args=None):
        base = Normal(loc, scale, validate_args=validate_args)
        if not base.batch_shape:
            base = base.expand([1])
        super().__init__(base, StickBreakingTransform(), validate_args=validate_args)

    loc = property(lambda self: self.base_dist.base_dist.loc)
    scale = property(lambda self: self.base_dist.base_dist.scale)


_LOG_2 = math.log(2)


def _mvdigamma(x, p):
    """The multivariate digamma function, the derivative of ``mvlgamma(x, p)``."""
    if not x.gt((p - 1) / 2).all():
        raise AssertionError("Wrong domain for multivariate digamma function.")
    return ember.digamma(x.unsqueeze(-1) - ember.arange(
        p, dtype=x.dtype, device=x.device).div(2).expand(x.shape + (-1,))).sum(-1)


class Wishart(_ScaleTril, ExponentialFamily):
    """The Wishart distribution over positive-definite matrices with ``df`` degrees of
    freedom and one of ``covariance_matrix``, ``precision_matrix`` or ``scale_tril``;
    sampled by Bartlett's decomposition (reparameterised).

    Example:
        >>> from ember.distributions import Wishart
        >>> d = Wishart(ember.tensor(4.), ember.eye(2))
        >>> d.mean, d.log_prob(ember.eye(2))
        (tensor([[4., 0.],
                [0., 4.]]), tensor(-4.2242))
    """
    support, has_rsample, _mean_carrier_measure = constraints.positive_definite, True, 0

    @property
    def arg_constraints(self):
        return {"covariance_matrix": constraints.positive_definite,
                "precision_matrix": constraints.positive_definite,
                "scale_tril": constraints.lower_cholesky,
                "df": constraints.greater_than(self.event_shape[-1] - 1)}

    def __init__(self, df, covariance_matrix=None, precision_matrix=None, scale_tril=None,
                 validate_args=None):
        given = (covariance_matrix, precision_matrix, scale_tril)
        if sum(m is not None for m in given) != 1:
            raise AssertionError("Exactly one of covariance_matrix or precision_matrix or "
                                 "scale_tril may be specified.")
        param = next(p for p in given if p is not None)
        if param.dim() < 2:
            raise ValueError("scale_tril must be at least two-dimensional, with optional "
                             "leading batch dimensions")
        if isinstance(df, Number):
            batch_shape = ember.Size(param.shape[:-2])
            self.df = ember.tensor(df, dtype=param.dtype, device=param.device)
        else:
            batch_shape = ember.broadcast_shapes(param.shape[:-2], df.shape)
            self.df = df.expand(batch_shape)
        event_shape = param.shape[-2:]
        if self.df.le(event_shape[-1] - 1).any():
            raise ValueError(f"Value of df={df} expected to be greater than ndim - 1 = "
                             f"{event_shape[-1] - 1}.")
        name, m, _ = _one_matrix(self, _MATRICES, given, batch_shape)
        if self.df.lt(event_shape[-1]).any():
            warnings.warn("Low df values detected. Singular samples are highly likely to occur "
                          "for ndim - 1 < df < ndim.", stacklevel=2)
        super().__init__(batch_shape, event_shape, validate_args=validate_args)
        self._unbroadcasted_scale_tril = _scale_tril_of(name, m)
        self._make_chi2()

    def _make_chi2(self):
        """Chi2(df - i), i < p: the squared diagonal of Bartlett's factor."""
        L = self._unbroadcasted_scale_tril
        self._batch_dims = [-(x + 1) for x in range(len(self._batch_shape))]
        self._dist_chi2 = Chi2(df=self.df.unsqueeze(-1) - ember.arange(
            self._event_shape[-1], dtype=L.dtype, device=L.device).expand(
                self._batch_shape + (-1,)))

    def expand(self, batch_shape, _instance=None):
        new = ExponentialFamily.expand(self, batch_shape, _instance)
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril.expand(
            new._batch_shape + self.event_shape)
        new._make_chi2()
        return new

    def _matrix_shape(self):
        return self._batch_shape + self._event_shape

    mean = property(lambda self: self.df.view(self._batch_shape + (1, 1)) * self.covariance_matrix)

    @property
    def mode(self):
        factor = self.df - self.covariance_matrix.shape[-1] - 1
        factor = ember.where(factor <= 0, math.nan, factor)
        return factor.view(self._batch_shape + (1, 1)) * self.covariance_matrix

    @property
    def variance(self):
        V = self.covariance_matrix
        diag_V = V.diagonal(dim1=-2, dim2=-1)
        return self.df.view(self._batch_shape + (1, 1)) * (
            V.pow(2) + diag_V.unsqueeze(-1) * diag_V.unsqueeze(-2))

    def _bartlett_sampling(self, sample_shape=ember.Size()):
        p = self._event_shape[-1]
        chi = self._dist_chi2.rsample(sample_shape).sqrt()
        noise = chi.clamp(min=ember.finfo(chi.dtype).eps).diag_embed(dim1=-2, dim2=-1)
        i, j = ember.tril_indices(p, p, offset=-1)
        noise[..., i, j] = ember.randn(ember.Size(sample_shape) + self._batch_shape +
                                       (p * (p - 1) // 2,), dtype=noise.dtype,
                                       device=noise.device)
        chol = self._unbroadcasted_scale_tril @ noise
        return chol @ chol.transpose(-2, -1)

    def rsample(self, sample_shape=ember.Size(), max_try_correction=None):
        """Bartlett samples; a numerically singular one is drawn again, up to
        ``max_try_correction`` (10) times, with a warning."""
        max_try_correction = 10 if max_try_correction is None else max_try_correction
        sample_shape = ember.Size(sample_shape)
        sample = self._bartlett_sampling(sample_shape)
        is_singular = ~self.support.check(sample)
        if self._batch_shape:
            is_singular = is_singular.amax(self._batch_dims)
        if is_singular.any():
            warnings.warn("Singular sample detected.", stacklevel=2)
            for _ in range(max_try_correction):
                sample_new = self._bartlett_sampling(sample_shape)
                sample = ember.where(is_singular.view(is_singular.shape + (1,) * (
                    sample.dim() - is_singular.dim())), sample_new, sample)
                is_singular = ~self.support.check(sample)
                if self._batch_shape:
                    is_singular = is_singular.amax(self._batch_dims)
                if not is_singular.any():
                    break
        return sample

    def log_prob(self, value):
        _check(self, value)
        nu, p = self.df, self._event_shape[-1]
        L = self._unbroadcasted_scale_tril
        return -nu * (p * _LOG_2 / 2 + self._half_log_det()) - ember.mvlgamma(nu / 2, p=p) + (
            nu - p - 1) / 2 * ember.linalg.slogdet(value).logabsdet - ember.cholesky_solve(
            value, L).diagonal(dim1=-2, dim2=-1).sum(dim=-1) / 2

    def entropy(self):
        nu, p = self.df, self._event_shape[-1]
        return (p + 1) * (p * _LOG_2 / 2 + self._half_log_det()) + ember.mvlgamma(
            nu / 2, p=p) - (nu - p - 1) / 2 * _mvdigamma(nu / 2, p=p) + nu * p / 2

    @property
    def _natural_params(self):
        return -self.precision_matrix / 2, (self.df - self._event_shape[-1] - 1) / 2

    def _log_normalizer(self, x, y):
        p = self._event_shape[-1]
        return (y + (p + 1) / 2) * (-ember.linalg.slogdet(-2 * x).logabsdet + _LOG_2 * p) + \
            ember.mvlgamma(y + (p + 1) / 2, p=p)


class LKJCholesky(Distribution):
    """The LKJ distribution over the lower Cholesky factors of ``dim x dim`` correlation
    matrices, with ``concentration`` (one: uniform over correlation matrices); sampled by the
    onion method.

    Example:
        >>> from ember.distributions import LKJCholesky
        >>> d = LKJCholesky(3, 0.5)
        >>> L = d.sample(); bool((L @ L.T).diagonal().allclose(ember.ones(3)))
        True
        >>> d.log_prob(ember.eye(3))
        tensor(-2.5310)
    """
    arg_constraints = {"concentration": constraints.positive}
    support = constraints.corr_cholesky

    def __init__(self, dim, concentration=1.0, validate_args=None):
        if dim < 2:
            raise ValueError(f"Expected dim to be an integer greater than or equal to 2. "
                             f"Found dim={dim}.")
        self.dim = dim
        self.concentration, = broadcast_all(concentration)
        # the squared norms of the rows' off-diagonal parts are Beta distributed
        marginal_conc = self.concentration + 0.5 * (self.dim - 2)
        offset = ember.arange(self.dim - 1, dtype=self.concentration.dtype,
                              device=self.concentration.device)
        offset = ember.cat([offset.new_zeros((1,)), offset])
        self._beta = Beta(offset + 0.5, marginal_conc.unsqueeze(-1) - 0.5 * offset)
        super().__init__(self.concentration.size(), ember.Size((dim, dim)), validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LKJCholesky, _instance)
        batch_shape = ember.Size(batch_shape)
        new.dim, new.concentration = self.dim, self.concentration.expand(batch_shape)
        new._beta = self._beta.expand(batch_shape + (self.dim,))
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def sample(self, sample_shape=ember.Size()):
        with ember.no_grad():
            y = self._beta.sample(sample_shape).unsqueeze(-1)
            u_normal = ember.randn(self._extended_shape(sample_shape), dtype=y.dtype,
                                   device=y.device).tril(-1)
            u_hypersphere = u_normal / u_normal.norm(dim=-1, keepdim=True)
            u_hypersphere[..., 0, :].fill_(0.0)         # (the first row is all zero: 0/0)
            w = ember.sqrt(y) * u_hypersphere
            diag = ember.clamp(1 - ember.sum(w ** 2, dim=-1), min=ember.finfo(w.dtype).tiny).sqrt()
            return w + ember.diag_embed(diag)

    def log_prob(self, value):
        _check(self, value)
        diag_elems = value.diagonal(dim1=-1, dim2=-2)[..., 1:]
        order = ember.arange(2, self.dim + 1, device=self.concentration.device)
        order = 2 * (self.concentration - 1).unsqueeze(-1) + self.dim - order
        unnormalized_log_pdf = ember.sum(order * diag_elems.log(), dim=-1)
        dm1 = self.dim - 1
        alpha = self.concentration + 0.5 * dm1
        normalize_term = 0.5 * dm1 * math.log(math.pi) + ember.mvlgamma(alpha - 0.5, dm1) - \
            ember.lgamma(alpha) * dm1
        return unnormalized_log_pdf - normalize_term
