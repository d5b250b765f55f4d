# Two commands: `make demo` and `make test`. Both set up .venv first; nothing else is needed by hand.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-min-client bench mutants clean chromium

$(STAMP): pyproject.toml
	@# Debian's python3 has no venv module until python3-venv is installed; as root, install it.
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null; }; } || \
		{ echo "$(PYTHON) cannot make a virtual environment: install python3-venv"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/archipelago demo

test: $(STAMP) chromium tests/identity/node_modules/.installed test-min-client
	$(BIN)/python -m pytest

# The identity tests run a real OpenID provider (panva's oidc-provider, OpenID Certified) with Node.js, from the npm
# registry; Node.js itself comes from Debian's packages when missing (as root).
tests/identity/node_modules/.installed: tests/identity/package.json tests/identity/package-lock.json
	@command -v npm >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; }; } || \
		{ echo "the identity tests need Node.js and npm: install them"; exit 1; }
	cd tests/identity && npm ci --silent --no-audit --no-fund
	touch $@

# The member client against the oldest `kubernetes` package pyproject.toml allows, in a venv of its own:
# its tests need only the simulator (--noconftest: no database, no browser).
MIN_CLIENT := .venv-min-client
KUBERNETES_MIN = $(shell sed -n 's/.*"kubernetes>=\([0-9.]*\)".*/\1/p' pyproject.toml)

$(MIN_CLIENT)/.installed-stamp: pyproject.toml
	test -x $(MIN_CLIENT)/bin/python || $(PYTHON) -m venv $(MIN_CLIENT)
	$(MIN_CLIENT)/bin/python -m pip install --quiet -e . "pytest>=8.0" "kubernetes==$(KUBERNETES_MIN)"
	touch $@

test-min-client: $(MIN_CLIENT)/.installed-stamp
	$(MIN_CLIENT)/bin/python -m pytest --noconftest -q -p no:cacheprovider tests/clusters/test_member_client.py

# The browser tests drive Debian's Chromium; install it when missing (needs root; otherwise they fail and say how).
chromium:
	@test -x /usr/bin/chromium || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
		echo "chromium is missing: install it with 'apt-get install -y chromium' (as root) for the browser tests"; }

bench: $(STAMP)
	$(BIN)/python bench/placement.py

# Mutation testing of the pure core and the outbox (bench/mutants.py); not part of `make test`: it takes a while.
$(VENV)/.mutants-stamp: $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[test,mutants]"
	touch $@

mutants: $(VENV)/.mutants-stamp
	$(BIN)/python bench/mutants.py

clean:
	rm -rf $(VENV) $(MIN_CLIENT) archipelago.db archipelago.db-* archipelago.secret test-artifacts mutants
