-- The scale harness's servers count calls of PL/pgSQL functions (batch sizes, batch-calls.sql).
ALTER SYSTEM SET track_functions = 'pl';
