//! Machinery shared by the scalable (sparse, stochastic) methods, one place each:
//! inducing-input initialisation ([`inducing`], with [`kmeans`]), minibatch streams
//! ([`minibatch`]), Adam with learning-rate schedules ([`adam`]), Ranganath et al.'s adaptive
//! SVI step ([`adaptive_rate`]), averages of an optimiser's iterates ([`iterate_average`]),
//! natural-gradient steps for a Gaussian q(u) ([`natgrad`]), Anderson acceleration of
//! fixed-point iterations such as GFITC's inner EP ([`anderson`]), marginals of whitened q(v) at a block of rows
//! ([`projection`]), and the fitted model of the sparse arg-max-likelihood methods
//! ([`argmax_model`]).
pub mod adam;
pub mod adaptive_rate;
pub mod anderson;
pub mod argmax_model;
pub mod inducing;
pub mod iterate_average;
pub mod kmeans;
pub mod minibatch;
pub mod natgrad;
pub mod projection;

pub use adam::{Adam, LearningRate};
pub use inducing::{class_weighted_inducing, inducing_sets, initial_kernels, InducingInit};
pub use iterate_average::IterateAverage;
pub use minibatch::Minibatches;
pub use natgrad::NaturalGaussian;
