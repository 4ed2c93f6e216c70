SELECT EXISTS (SELECT 1 FROM {schema}.pools WHERE pool_id = $1);
