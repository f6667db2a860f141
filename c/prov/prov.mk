# c/prov/prov.mk — the provider's part of c/Makefile (included there; paths
# are relative to c/). Builds $(BUILD)/libiwarpd-fi.so from c/prov and the
# static libiwverbs ($(LIBA)); only fi_prov_ini is exported (prov/iwd.map).
#   make -C c prov       the provider (and the tag-matching unit test)
#   make -C c install    into Debian's libfabric provider directory
# c/prov/Makefile builds the same standalone (test/libfabric uses it).
PROV_SRCS := $(wildcard prov/iwd_*.c)
PROV_OBJS := $(PROV_SRCS:prov/%.c=$(BUILD)/prov/%.o)
PROV_SO   := $(BUILD)/libiwarpd-fi.so
PROV_TEST := $(BUILD)/prov/test_match
MULTIARCH := $(shell dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || $(CC) -print-multiarch 2>/dev/null)
# Where Debian's libfabric looks for providers without FI_PROVIDER_PATH:
# its compiled-in provider_path (`fi_info -e`).
PROVDIR   ?= /usr/lib/$(MULTIARCH)/libfabric

PROV_ATOMIC_TEST := $(BUILD)/prov/t_fi_atomic
PROV_MSGDATA_TEST := $(BUILD)/prov/t_fi_msgdata

prov: $(PROV_SO) $(PROV_TEST) $(PROV_ATOMIC_TEST) $(PROV_MSGDATA_TEST)

# FI_ATOMIC / FI_REMOTE_CQ_DATA between processes (test/libfabric/atomic_test.go,
# msgdata_test.go), under AddressSanitizer and UBSan; they load the provider
# through libfabric.
$(PROV_ATOMIC_TEST) $(PROV_MSGDATA_TEST): $(BUILD)/prov/t_%: prov/tests/t_%.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
		-fno-sanitize-recover=all -o $@ $< -lfabric

$(BUILD)/prov/%.o: prov/%.c $(wildcard prov/*.h) $(CORE_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_CORE) -Iprov -c $< -o $@

$(PROV_SO): $(PROV_OBJS) $(LIBA) prov/iwd.map
	$(CC) -shared -Wl,--version-script=prov/iwd.map -Wl,-z,defs $(SANLD) -o $@ $(PROV_OBJS) $(LIBA) \
		$(LDLIBS_CORE) -lfabric

$(PROV_TEST): prov/tests/test_match.c prov/iwd_tagged.c prov/iwd.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_CORE) -Iprov -fsanitize=address,undefined -fno-sanitize-recover=all -o $@ \
		prov/tests/test_match.c prov/iwd_tagged.c

install: $(PROV_SO)
	install -d $(DESTDIR)$(PROVDIR)
	install -m 0644 $(PROV_SO) $(DESTDIR)$(PROVDIR)/libiwarpd-fi.so
