//! zoo
