# Test URLs of the local database servers, the ones .ci/run starts.
export MASTERPAY_TEST_POSTGRES_URL="${MASTERPAY_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
export MASTERPAY_TEST_MYSQL_URL="${MASTERPAY_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306/mysql}"
