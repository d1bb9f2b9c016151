//! squeueha
