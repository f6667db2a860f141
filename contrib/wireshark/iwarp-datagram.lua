-- iwarp-datagram.lua: Wireshark dissector for the iwarpd datagram-iWARP profile
-- (docs/wire-format.md in the iwarpd repository). Wireshark 4.0 API, Lua 5.2.
--
--   UD datagram (UDP payload):  keys (8) | DDP segment | CRC32c (4, little-endian)
--   RD datagram (UDP payload):  keys (8) | RD header (24) | DDP segment | CRC32c (4, LE)
--   RD ACK datagram:            keys (8) | RD header (24) | CRC32c (4, LE)
--
-- The DDP segment (RFC 5041 header, RDMAP header, payload) is handed to
-- Wireshark's own "iwarp_ddp_rdmap" dissector. This file decodes the key
-- header (destination Q_Key, source Q_Key), the RD header, checks the
-- CRC32c trailer, and decodes the Write-Record header (RDMAP opcode 0xC;
-- 0xD: Write-Record with Immediate, its header then 8 octets of RFC 7306
-- Immediate Data) and the Send with Immediate's Immediate Data (opcodes
-- 0x8/0x9: 8 octets before every segment's payload), which Wireshark 4.0
-- does not know. Atomic Requests/Responses (0xA/0xB) are decoded by Wireshark's own
-- dissector (its iwarp_rdma.atomic.* fields); this file checks that they
-- are single segments of the RFC 7306 length.
--
-- Usage: tshark -X lua_script:iwarp-datagram.lua -r capture.pcap
--        (or copy into the personal Lua plugins folder; see README.md).

local ddp_rdmap = Dissector.get("iwarp_ddp_rdmap")

local proto = Proto("iwarp_dgram", "iWARP Datagram Profile (iwarpd)")

-- Preferences -----------------------------------------------------------------

local DEFAULT_UD_PORTS = "17000-17499"
local DEFAULT_RD_PORTS = "17500-17999"

proto.prefs.ud_ports = Pref.range("UD UDP ports", DEFAULT_UD_PORTS,
  "UDP ports of unreliable-datagram (UD) queue pairs", 65535)
proto.prefs.rd_ports = Pref.range("RD UDP ports", DEFAULT_RD_PORTS,
  "UDP ports of reliable-datagram (RD) queue pairs; a datagram with either port in this range is decoded as RD", 65535)
proto.prefs.zero_crc_unused = Pref.bool("Zero CRC means CRC off", true,
  "A trailer of 0 is written by senders whose QP has CRC off: do not check it")

-- Fields ------------------------------------------------------------------------

local rd_types = { [1] = "DATA", [2] = "ACK" }
local crc_status_names = { [0] = "Bad", [1] = "Good", [2] = "Not checked (CRC off)" }
local framing_names = { [0] = "UD", [1] = "RD" }

local f = {
  framing      = ProtoField.uint8("iwarp_dgram.framing", "Framing", base.DEC, framing_names),
  qkey         = ProtoField.uint32("iwarp_dgram.qkey", "Q_Key (destination QP's)", base.HEX),
  src_qkey     = ProtoField.uint32("iwarp_dgram.src_qkey", "Source Q_Key (sending QP's)", base.HEX),
  rd           = ProtoField.none("iwarp_dgram.rd", "RD header"),
  rd_version   = ProtoField.uint8("iwarp_dgram.rd.version", "Version", base.DEC, nil, 0xF0),
  rd_type      = ProtoField.uint8("iwarp_dgram.rd.type", "Type", base.DEC, rd_types, 0x0F),
  rd_flags     = ProtoField.uint8("iwarp_dgram.rd.flags", "Flags", base.HEX),
  rd_f_ack     = ProtoField.bool("iwarp_dgram.rd.flags.ack", "ACK (ack fields valid)", 8, nil, 0x80),
  rd_f_ackreq  = ProtoField.bool("iwarp_dgram.rd.flags.ackreq", "ACKREQ (acknowledge now)", 8, nil, 0x40),
  rd_f_notrdy  = ProtoField.bool("iwarp_dgram.rd.flags.notready", "NOTREADY (no posted receive)", 8, nil, 0x20),
  rd_f_reset   = ProtoField.bool("iwarp_dgram.rd.flags.reset", "RESET (state for this pair dropped)", 8, nil, 0x10),
  rd_f_ext     = ProtoField.bool("iwarp_dgram.rd.flags.ext_sack", "X (takes SACK Block ACKs)", 8, nil, 0x08),
  rd_f_block   = ProtoField.bool("iwarp_dgram.rd.flags.sack_block", "B (SACK Block: bitmap based at Seq)", 8, nil, 0x04),
  rd_f_chal    = ProtoField.bool("iwarp_dgram.rd.flags.challenge", "C (Challenge: cookie in Cumulative ack)", 8, nil, 0x02),
  rd_f_rsvd    = ProtoField.uint8("iwarp_dgram.rd.flags.reserved", "Reserved", base.HEX, nil, 0x01),
  rd_window    = ProtoField.uint16("iwarp_dgram.rd.window", "Window", base.DEC),
  rd_inc       = ProtoField.uint32("iwarp_dgram.rd.incarnation", "Sender incarnation", base.HEX),
  rd_echo      = ProtoField.uint32("iwarp_dgram.rd.echoed_incarnation", "Echoed incarnation", base.HEX),
  rd_seq       = ProtoField.uint32("iwarp_dgram.rd.seq", "Sequence number", base.DEC),
  rd_cumack    = ProtoField.uint32("iwarp_dgram.rd.cumack", "Cumulative ack", base.DEC),
  rd_sack      = ProtoField.uint32("iwarp_dgram.rd.sack", "Selective-ack bitmap", base.HEX),
  rd_sacked    = ProtoField.uint32("iwarp_dgram.rd.sacked", "Selectively acked", base.DEC),
  wr           = ProtoField.none("iwarp_dgram.wr", "Write-Record header"),
  wr_id        = ProtoField.uint32("iwarp_dgram.wr.record_id", "Record ID", base.DEC),
  wr_len       = ProtoField.uint32("iwarp_dgram.wr.msg_len", "Message length", base.DEC),
  wr_off       = ProtoField.uint32("iwarp_dgram.wr.msg_offset", "Message offset", base.DEC),
  wr_base      = ProtoField.uint64("iwarp_dgram.wr.base_to", "Message base TO (TO - offset)", base.HEX),
  imm          = ProtoField.bytes("iwarp_dgram.imm", "Immediate Data (RFC 7306)"),
  imm_value    = ProtoField.uint32("iwarp_dgram.imm.value", "Immediate value (verbs imm_data, octets 0-3)", base.HEX),
  crc          = ProtoField.uint32("iwarp_dgram.crc", "CRC32c (little-endian on the wire)", base.HEX),
  crc_computed = ProtoField.uint32("iwarp_dgram.crc.computed", "CRC32c computed", base.HEX),
  crc_status   = ProtoField.uint8("iwarp_dgram.crc.status", "CRC status", base.DEC, crc_status_names),
  gso          = ProtoField.none("iwarp_dgram.gso", "UDP GSO super-packet"),
  gso_count    = ProtoField.uint32("iwarp_dgram.gso.count", "Datagrams in the super-packet", base.DEC),
  gso_size     = ProtoField.uint32("iwarp_dgram.gso.seg_size", "Segment size (inferred from the CRC trailers)", base.DEC),
}
proto.fields = {
  f.framing, f.qkey, f.src_qkey, f.rd, f.rd_version, f.rd_type, f.rd_flags, f.rd_f_ack, f.rd_f_ackreq,
  f.rd_f_notrdy, f.rd_f_reset, f.rd_f_ext, f.rd_f_block, f.rd_f_chal, f.rd_f_rsvd, f.rd_window, f.rd_inc, f.rd_echo, f.rd_seq,
  f.rd_cumack, f.rd_sack, f.rd_sacked, f.wr, f.wr_id, f.wr_len, f.wr_off, f.wr_base,
  f.imm, f.imm_value, f.crc, f.crc_computed, f.crc_status, f.gso, f.gso_count, f.gso_size,
}

local e = {
  bad_crc   = ProtoExpert.new("iwarp_dgram.crc.bad", "Bad CRC32c",
                expert.group.CHECKSUM, expert.severity.ERROR),
  short     = ProtoExpert.new("iwarp_dgram.short", "Datagram shorter than its framing",
                expert.group.MALFORMED, expert.severity.ERROR),
  version   = ProtoExpert.new("iwarp_dgram.rd.bad_version", "Unknown RD header version",
                expert.group.MALFORMED, expert.severity.ERROR),
  bad_type  = ProtoExpert.new("iwarp_dgram.rd.bad_type", "Unknown RD datagram type",
                expert.group.MALFORMED, expert.severity.ERROR),
  ack_data  = ProtoExpert.new("iwarp_dgram.rd.ack_payload", "RD ACK datagram carries octets after its header",
                expert.group.MALFORMED, expert.severity.ERROR),
  rsvd      = ProtoExpert.new("iwarp_dgram.rd.reserved", "Reserved RD flag bits set",
                expert.group.PROTOCOL, expert.severity.WARN),
  wr_bounds = ProtoExpert.new("iwarp_dgram.wr.bounds", "Write-Record segment lies outside its message",
                expert.group.PROTOCOL, expert.severity.WARN),
  atomic    = ProtoExpert.new("iwarp_dgram.atomic.bad", "RFC 7306 atomic message that is not one segment of its length on its queue",
                expert.group.MALFORMED, expert.severity.ERROR),
  atomic_ud = ProtoExpert.new("iwarp_dgram.atomic.ud", "RFC 7306 atomic on a UD queue pair (RD only)",
                expert.group.PROTOCOL, expert.severity.WARN),
  wr_last   = ProtoExpert.new("iwarp_dgram.wr.last", "Write-Record segment: DDP L bit not set exactly on the segment that ends the message",
                expert.group.PROTOCOL, expert.severity.WARN),
  imm_rsvd  = ProtoExpert.new("iwarp_dgram.imm.reserved", "Write-Record with Immediate: Immediate Data octets 4-7 not zero",
                expert.group.PROTOCOL, expert.severity.WARN),
  gso       = ProtoExpert.new("iwarp_dgram.gso", "UDP GSO super-packet captured on the sending host: several datagrams in one",
                expert.group.SEQUENCE, expert.severity.NOTE),
}
proto.experts = { e.bad_crc, e.short, e.version, e.bad_type, e.ack_data, e.rsvd, e.wr_bounds, e.atomic, e.atomic_ud,
  e.wr_last, e.imm_rsvd, e.gso }

-- CRC32c (Castagnoli, reflected 0x82F63B78, init/xorout 0xFFFFFFFF) -----------

local crc_table = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do
    if bit32.band(c, 1) ~= 0 then
      c = bit32.bxor(bit32.rshift(c, 1), 0x82F63B78)
    else
      c = bit32.rshift(c, 1)
    end
  end
  crc_table[i] = c
end

local function crc32c(s)
  local c = 0xFFFFFFFF
  for i = 1, #s do
    c = bit32.bxor(bit32.rshift(c, 8), crc_table[bit32.band(bit32.bxor(c, s:byte(i)), 0xFF)])
  end
  return bit32.bnot(c)
end

-- Port ranges ---------------------------------------------------------------------

local function in_range(r, port)
  for part in string.gmatch(tostring(r), "[^,%s]+") do
    local lo, hi = string.match(part, "^(%d+)%-(%d+)$")
    if lo then
      if port >= tonumber(lo) and port <= tonumber(hi) then return true end
    elseif tonumber(part) == port then
      return true
    end
  end
  return false
end

-- Dissection ------------------------------------------------------------------------

local DDP_TAGGED_LEN, DDP_UNTAGGED_LEN = 14, 18
local KEYS_LEN, RD_LEN, CRC_LEN, WR_LEN = 8, 24, 4, 12
local OP_WRITE_RECORD, OP_WRITE_RECORD_IMM = 0xC, 0xD
local OP_IMM, OP_IMM_SE, OP_ATOMIC_REQ, OP_ATOMIC_RESP = 0x8, 0x9, 0xA, 0xB
local IMM_LEN, ATOMIC_REQ_LEN, ATOMIC_RESP_LEN = 8, 52, 12

local function ddp_header_len(tvb, off)
  if bit32.band(tvb(off, 1):uint(), 0x80) ~= 0 then return DDP_TAGGED_LEN end
  return DDP_UNTAGGED_LEN
end

-- Adds the Write-Record subtree for an opcode 0xC segment at [off, off+len)
-- (0xD, with_imm: and the Immediate Data after the Write-Record header).
local function dissect_write_record(tvb, off, len, tree, with_imm)
  local hlen = DDP_TAGGED_LEN + WR_LEN
  if with_imm then hlen = hlen + IMM_LEN end
  if len < hlen then
    tree:add_proto_expert_info(e.short, string.format("Write-Record segment shorter than %d octets", hlen))
    return ""
  end
  local r = tvb(off + DDP_TAGGED_LEN, WR_LEN)
  local st = tree:add(f.wr, r)
  local id = r(0, 4):uint()
  local mlen = r(4, 4):uint()
  local moff = r(8, 4):uint()
  st:add(f.wr_id, r(0, 4))
  st:add(f.wr_len, r(4, 4))
  st:add(f.wr_off, r(8, 4))
  local to = tvb(off + 6, 8):uint64()
  st:add(f.wr_base, tvb(off + 6, 8), to - UInt64(moff)):set_generated()
  local payload = len - hlen
  if moff + payload > mlen then
    st:add_proto_expert_info(e.wr_bounds)
  elseif (bit32.band(tvb(off, 1):uint(), 0x40) ~= 0) ~= (moff + payload == mlen) then
    st:add_proto_expert_info(e.wr_last)
  end
  if not with_imm then
    return string.format(" Write-Record id=%d off=%d/%d", id, moff, mlen)
  end
  local ir = tvb(off + DDP_TAGGED_LEN + WR_LEN, IMM_LEN)
  st:add(f.imm, ir)
  st:add(f.imm_value, ir(0, 4))
  if ir(4, 4):uint() ~= 0 then st:add_proto_expert_info(e.imm_rsvd) end
  return string.format(" Write-Record with Immediate id=%d off=%d/%d imm=0x%08x", id, moff, mlen, ir(0, 4):uint())
end

-- Adds the Immediate Data subtree of a Send with Immediate segment (opcode
-- 0x8/0x9, untagged) at [off, off+len).
local function dissect_immediate(tvb, off, len, tree)
  if len < DDP_UNTAGGED_LEN + IMM_LEN then
    tree:add_proto_expert_info(e.short, "Immediate Data segment shorter than 26 octets")
    return ""
  end
  local r = tvb(off + DDP_UNTAGGED_LEN, IMM_LEN)
  tree:add(f.imm, r)
  tree:add(f.imm_value, r(0, 4))
  return string.format(" Send with Immediate imm=0x%08x", r(0, 4):uint())
end

-- Checks an Atomic Request/Response: untagged, one segment (L=1, MO=0) of
-- exactly its header, on QN 1 / QN 3; RD only.
local function check_atomic(tvb, off, len, opcode, rd, tree)
  local want, qn = ATOMIC_REQ_LEN, 1
  if opcode == OP_ATOMIC_RESP then want, qn = ATOMIC_RESP_LEN, 3 end
  if not rd then tree:add_proto_expert_info(e.atomic_ud) end
  if len ~= DDP_UNTAGGED_LEN + want or bit32.band(tvb(off, 1):uint(), 0x40) == 0 or
      tvb(off + 6, 4):uint() ~= qn or tvb(off + 14, 4):uint() ~= 0 then
    tree:add_proto_expert_info(e.atomic)
  end
end

-- dissect_one decodes one datagram (a whole UDP payload, or one datagram of
-- a GSO super-packet: part set).
local function dissect_one(tvb, pinfo, tree, rd, part)
  local n = tvb:len()
  local root = tree:add(proto, tvb())
  root:add(f.framing, rd and 1 or 0):set_generated()

  local min = KEYS_LEN + (rd and (RD_LEN + CRC_LEN) or (DDP_TAGGED_LEN + CRC_LEN))
  if n < min then
    root:add_proto_expert_info(e.short)
    pinfo.cols.protocol = "iWARP-DG"
    return n
  end

  -- Key header: the destination QP's Q_Key, the sender's own.
  root:add(f.qkey, tvb(0, 4))
  root:add(f.src_qkey, tvb(4, 4))

  -- CRC trailer: covers every octet before it (key and RD headers included).
  local body = n - CRC_LEN
  local crc = tvb(body, CRC_LEN):le_uint()
  local ci = root:add_le(f.crc, tvb(body, CRC_LEN))
  local crc_info = ""
  if crc == 0 and proto.prefs.zero_crc_unused then
    root:add(f.crc_status, 2):set_generated()
  else
    local computed = crc32c(tvb:raw(0, body))
    root:add(f.crc_computed, computed):set_generated()
    if computed == crc then
      root:add(f.crc_status, 1):set_generated()
    else
      root:add(f.crc_status, 0):set_generated()
      ci:add_proto_expert_info(e.bad_crc, string.format("Bad CRC32c: trailer 0x%08x, computed 0x%08x", crc, computed))
      crc_info = " [BAD CRC]"
    end
  end

  local off = KEYS_LEN
  local info = ""
  if rd then
    local r = tvb(KEYS_LEN, RD_LEN)
    local rt = root:add(f.rd, r)
    local version = bit32.rshift(r(0, 1):uint(), 4)
    local typ = bit32.band(r(0, 1):uint(), 0x0F)
    local flags = r(1, 1):uint()
    rt:add(f.rd_version, r(0, 1))
    rt:add(f.rd_type, r(0, 1))
    local ft = rt:add(f.rd_flags, r(1, 1))
    ft:add(f.rd_f_ack, r(1, 1))
    ft:add(f.rd_f_ackreq, r(1, 1))
    ft:add(f.rd_f_notrdy, r(1, 1))
    ft:add(f.rd_f_reset, r(1, 1))
    ft:add(f.rd_f_ext, r(1, 1))
    ft:add(f.rd_f_block, r(1, 1))
    ft:add(f.rd_f_chal, r(1, 1))
    ft:add(f.rd_f_rsvd, r(1, 1))
    if bit32.band(flags, 0x01) ~= 0 then ft:add_proto_expert_info(e.rsvd) end
    rt:add(f.rd_window, r(2, 2))
    rt:add(f.rd_inc, r(4, 4))
    rt:add(f.rd_echo, r(8, 4))
    rt:add(f.rd_seq, r(12, 4))
    rt:add(f.rd_cumack, r(16, 4))
    local st = rt:add(f.rd_sack, r(20, 4))
    local cumack, sack = r(16, 4):uint(), r(20, 4):uint()
    local base = bit32.band(cumack + 1, 0xFFFFFFFF)
    if typ == 2 and bit32.band(flags, 0x04) ~= 0 then base = r(12, 4):uint() end -- SACK Block
    for i = 0, 31 do
      if bit32.band(sack, bit32.lshift(1, i)) ~= 0 then
        st:add(f.rd_sacked, bit32.band(base + i, 0xFFFFFFFF)):set_generated()
      end
    end
    if version ~= 1 then
      rt:add_proto_expert_info(e.version)
      pinfo.cols.protocol = "iWARP-RD"
      return n
    end
    local names = {}
    if bit32.band(flags, 0x80) ~= 0 then names[#names + 1] = "ACK" end
    if bit32.band(flags, 0x40) ~= 0 then names[#names + 1] = "ACKREQ" end
    if bit32.band(flags, 0x20) ~= 0 then names[#names + 1] = "NOTREADY" end
    if bit32.band(flags, 0x10) ~= 0 then names[#names + 1] = "RESET" end
    local fl = table.concat(names, ",")
    if typ == 1 then
      info = string.format("RD DATA seq=%d", r(12, 4):uint())
    elseif typ == 2 then
      info = "RD ACK"
    else
      rt:add_proto_expert_info(e.bad_type)
      pinfo.cols.protocol = "iWARP-RD"
      return n
    end
    if bit32.band(flags, 0x80) ~= 0 then
      info = info .. string.format(" cumack=%d sack=0x%x win=%d", cumack, sack, r(2, 2):uint())
    end
    if fl ~= "" then info = info .. " [" .. fl .. "]" end
    off = KEYS_LEN + RD_LEN
    if typ == 2 then
      if body > off then root:add_proto_expert_info(e.ack_data) end
      pinfo.cols.protocol = "iWARP-RD"
      if part then
        pinfo.cols.info:append(" | " .. info .. crc_info)
      else
        pinfo.cols.info = info .. crc_info
      end
      return n
    end
  end

  -- One DDP segment in [off, body).
  local seglen = body - off
  if seglen < 1 or seglen < ddp_header_len(tvb, off) then
    root:add_proto_expert_info(e.short, "DDP segment shorter than its header")
    pinfo.cols.protocol = rd and "iWARP-RD" or "iWARP-UD"
    return n
  end
  local opcode = bit32.band(tvb(off + 1, 1):uint(), 0x0F)
  local tagged = bit32.band(tvb(off, 1):uint(), 0x80) ~= 0
  if tagged and (opcode == OP_WRITE_RECORD or opcode == OP_WRITE_RECORD_IMM) then
    info = info .. dissect_write_record(tvb, off, seglen, root, opcode == OP_WRITE_RECORD_IMM)
  end
  if not tagged and (opcode == OP_IMM or opcode == OP_IMM_SE) then
    info = info .. dissect_immediate(tvb, off, seglen, root)
  end
  if not tagged and (opcode == OP_ATOMIC_REQ or opcode == OP_ATOMIC_RESP) then
    check_atomic(tvb, off, seglen, opcode, rd, root)
  end
  ddp_rdmap:call(tvb(off, seglen):tvb(), pinfo, tree)
  local prefix = (rd and "" or "UD") .. info
  prefix = string.gsub(prefix, "^%s+", "")
  pinfo.cols.info:prepend(prefix .. " ")
  if crc_info ~= "" then pinfo.cols.info:append(crc_info) end
  return n
end

-- UDP GSO super-packets (docs/iwarpdump.md "GSO super-packets"): a capture
-- taken on the sending host holds a run of equal-size datagrams sent with
-- one sendmsg (UDP_SEGMENT) as one UDP datagram. Each is a whole datagram
-- with its own CRC trailer; all have the segment size but the last, which
-- may be shorter. When the whole payload's trailer is not its CRC32c, the
-- shortest size S at which the first datagram's trailer holds and every
-- further S octets end in a valid trailer is the segment size. Trailers of
-- 0 (CRC off) give nothing to find the boundaries by: not split.

local function trailer_ok(s)
  local n = #s
  local want = s:byte(n - 3) + s:byte(n - 2) * 0x100 + s:byte(n - 1) * 0x10000 + s:byte(n) * 0x1000000
  return want ~= 0 and crc32c(s:sub(1, n - 4)) == want
end

local function gso_split(raw, least)
  local n = #raw
  if n < 2 * least or trailer_ok(raw) then return nil end
  local c = 0xFFFFFFFF
  for i = 1, least - 5 do
    c = bit32.bxor(bit32.rshift(c, 8), crc_table[bit32.band(bit32.bxor(c, raw:byte(i)), 0xFF)])
  end
  for size = least, n - 1 do
    c = bit32.bxor(bit32.rshift(c, 8), crc_table[bit32.band(bit32.bxor(c, raw:byte(size - 4)), 0xFF)])
    local want = raw:byte(size - 3) + raw:byte(size - 2) * 0x100 + raw:byte(size - 1) * 0x10000 + raw:byte(size) * 0x1000000
    if want ~= 0 and bit32.bnot(c) == want then
      local parts, ok = { { 0, size } }, true
      local off = size
      while off < n do
        local len = math.min(size, n - off)
        if len < least or not trailer_ok(raw:sub(off + 1, off + len)) then ok = false break end
        parts[#parts + 1] = { off, len }
        off = off + len
      end
      if ok then return size, parts end
    end
  end
  return nil
end

function proto.dissector(tvb, pinfo, tree)
  local n = tvb:len()
  local rd = in_range(proto.prefs.rd_ports, pinfo.src_port) or in_range(proto.prefs.rd_ports, pinfo.dst_port)
  local least = KEYS_LEN + (rd and (RD_LEN + CRC_LEN) or (DDP_TAGGED_LEN + CRC_LEN))
  local size, parts = nil, nil
  if n >= 2 * least then size, parts = gso_split(tvb:raw(0, n), least) end
  if not parts then return dissect_one(tvb, pinfo, tree, rd, false) end
  local g = tree:add(f.gso, tvb())
  g:add(f.gso_count, #parts):set_generated()
  g:add(f.gso_size, size):set_generated()
  g:add_proto_expert_info(e.gso, string.format("UDP GSO super-packet captured on the sending host: %d datagrams of %d octets, the last %d",
    #parts, size, parts[#parts][2]))
  for i, p in ipairs(parts) do
    dissect_one(tvb(p[1], p[2]):tvb(), pinfo, tree, rd, i > 1)
  end
  pinfo.cols.info:prepend(string.format("[GSO x%d] ", #parts))
  return n
end

-- Registration ------------------------------------------------------------------------

local udp_table = DissectorTable.get("udp.port")
local registered = {}

local function register_ports()
  for _, r in ipairs(registered) do udp_table:remove(r, proto) end
  registered = {}
  for _, r in ipairs({ tostring(proto.prefs.ud_ports), tostring(proto.prefs.rd_ports) }) do
    if r ~= "" then
      udp_table:add(r, proto)
      registered[#registered + 1] = r
    end
  end
end

function proto.prefs_changed()
  register_ports()
end

register_ports()
