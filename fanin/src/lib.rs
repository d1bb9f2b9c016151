//! Exactly-once fan-in of fragmented jobs on squeueha's SQLite database.
