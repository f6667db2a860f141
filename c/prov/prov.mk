# c/prov/prov.mk — the provider's part of c/Makefile (included there; paths
# are relative to c/). Builds $(BUILD)/libiwarpd-fi.so from c/prov and the
# static libiwverbs ($(LIBA)); only fi_prov_ini is exported (prov/iwd.map).
#   make -C c prov       the provider (and the tag-matching unit test)
#   make -C c install    into Debian's libfabric provider directory, or with
#                        PREFIX=DIR into DIR/lib/libfabric (private)
# c/prov/Makefile builds the same standalone (test/libfabric uses it).
PROV_SRCS := $(wildcard prov/iwd_*.c)
PROV_OBJS := $(PROV_SRCS:prov/%.c=$(BUILD)/prov/%.o)
PROV_SO   := $(BUILD)/libiwarpd-fi.so
PROV_TEST := $(BUILD)/prov/test_match
MULTIARCH := $(shell dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || $(CC) -print-multiarch 2>/dev/null)
# Where Debian's libfabric looks for providers without FI_PROVIDER_PATH:
# its compiled-in provider_path (`fi_info -e`). With PREFIX given to make
# install (a private install), $(PREFIX)/lib/libfabric instead, loaded only
# through FI_PROVIDER_PATH (docs/libfabric.md "Installing the provider").
ifneq ($(filter command line environment,$(origin PREFIX)),)
PROVDIR   ?= $(PREFIX)/lib/libfabric
PROV_PRIVATE := private
else
PROVDIR   ?= /usr/lib/$(MULTIARCH)/libfabric
PROV_PRIVATE :=
endif
# The version string the provider embeds (iwd_init.c): git describe of the
# checkout, so that an installed file says which build it is.
IWD_BUILD := $(shell git describe --always --dirty 2>/dev/null || echo unknown)

PROV_ATOMIC_TEST := $(BUILD)/prov/t_fi_atomic
PROV_MSGDATA_TEST := $(BUILD)/prov/t_fi_msgdata
PROV_FASTPATH_TEST := $(BUILD)/prov/t_fi_fastpath
PROV_FPRMA_TEST := $(BUILD)/prov/t_fi_fprma
PROV_FPREQ_TEST := $(BUILD)/prov/t_fi_fpreq

prov: $(PROV_SO) $(PROV_TEST) $(PROV_ATOMIC_TEST) $(PROV_MSGDATA_TEST) $(PROV_FASTPATH_TEST) $(PROV_FPRMA_TEST) $(PROV_FPREQ_TEST)

# FI_ATOMIC / FI_REMOTE_CQ_DATA / the DGRAM fast path between processes
# (test/libfabric/atomic_test.go, msgdata_test.go, fastpath_test.go), under
# AddressSanitizer and UBSan; they load the provider through libfabric.
$(PROV_ATOMIC_TEST) $(PROV_MSGDATA_TEST) $(PROV_FASTPATH_TEST) $(PROV_FPRMA_TEST) $(PROV_FPREQ_TEST): $(BUILD)/prov/t_%: prov/tests/t_%.c prov/tests/fitest.h
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
		-fno-sanitize-recover=all -o $@ $< -lfabric

# iwd_init.o is rebuilt when the checkout's description changes.
$(BUILD)/prov/build.stamp: FORCE
	@mkdir -p $(dir $@)
	@echo '$(IWD_BUILD)' | cmp -s - $@ || echo '$(IWD_BUILD)' > $@
FORCE:
$(BUILD)/prov/iwd_init.o: $(BUILD)/prov/build.stamp
$(BUILD)/prov/iwd_init.o: CFLAGS_CORE += -DIWD_BUILD='"$(IWD_BUILD)"'

$(BUILD)/prov/%.o: prov/%.c $(wildcard prov/*.h) $(CORE_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_CORE) $(if $(PROV_TRACE),-DIWD_TRACE) -Iprov -c $< -o $@

$(PROV_SO): $(PROV_OBJS) $(LIBA) prov/iwd.map
	$(CC) -shared -Wl,--version-script=prov/iwd.map -Wl,-z,defs $(SANLD) -o $@ $(PROV_OBJS) $(LIBA) \
		$(LDLIBS_CORE) -lfabric

$(PROV_TEST): prov/tests/test_match.c prov/iwd_tagged.c prov/iwd.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_CORE) -Iprov -fsanitize=address,undefined -fno-sanitize-recover=all -o $@ \
		prov/tests/test_match.c prov/iwd_tagged.c

# Says what it replaces (build id, version) and, for a private install,
# the FI_PROVIDER_PATH to use.
install: $(PROV_SO)
	@../scripts/install-provider.sh $(PROV_SO) '$(DESTDIR)' '$(PROVDIR)' '$(PROV_PRIVATE)'
