-- Wireshark dissector for the gradient aggregation protocol, version 1 (revision 1.1):
-- the 20-byte gradient header and its payload on both carriages of spec section 1.
--
--   UDP carriage:    Ethernet / IPv4|IPv6 / UDP port `gradient_udp_port` / gradient / payload
--                    (the port is this dissector's preference grad.udp_port, default 49374, 0xC0DE,
--                    the appliance's default; it is registered in the "udp.port" table).
--   RoCEv2 carriage: Ethernet / IPv4|IPv6 / UDP 4791 / BTH (opcode 0x64, UD SEND Only) / DETH /
--                    gradient / payload / pad / ICRC. Wireshark's InfiniBand dissector hands the
--                    payload of a SEND to the "infiniband.payload" heuristic table; this dissector's
--                    heuristic claims it only when the BTH opcode is UD SEND Only and the header is
--                    a version-1 one with a known op, dtype and flag combination whose data_length
--                    accounts for every byte but the pad. Packets to or from QP 0 or 1 (the
--                    appliance's QPN is 1 by default, so contributions go to it and results come
--                    from it) are decoded by Wireshark as management datagrams and never reach
--                    that table: for those, a postdissector applies the same checks to the bytes
--                    after the DETH.
--
-- Use:   tshark -X lua_script:tools/wireshark/gradient.lua -r FILE -V
--        (or copy this file to ~/.local/lib/wireshark/plugins/).
-- Filter fields: grad.version, grad.flags (grad.flags.result/.retransmit/.nak/.probe),
-- grad.op, grad.collective_id, grad.dtype, grad.reason / grad.nak_reason / grad.slot_state (the
-- reason byte, named after what it is on that packet), grad.worker_rank, grad.tensor_offset,
-- grad.data_length, grad.round, grad.payload, grad.padding (RoCEv2), grad.trailing, and the
-- decoded grad.kind, grad.carriage, grad.elements, grad.lane.{f32,f16,bf16,i32} (the first
-- grad.lanes lanes), grad.status.rank_in, grad.status.ranks_in.
-- Preferences: grad.udp_port (default 49374; 0 turns the UDP carriage off), grad.lanes (8).
-- Field layout and codes: spec sections 2, 5 and 7; dataplane/src/packet/wire/gradient.rs.

local grad = Proto("grad", "Gradient aggregation protocol")

local HEADER_LEN = 20
local VERSION = 1
local DEFAULT_UDP_PORT = 49374 -- 0xC0DE, spec section 1
local UD_SEND_ONLY = 0x64
local RANK_NONE = 0xffff

local FLAG_RESULT, FLAG_RETRANSMIT, FLAG_NAK, FLAG_PROBE = 0x1, 0x2, 0x4, 0x8

local OPS = { [1] = "ALL_REDUCE_SUM", [2] = "ALL_REDUCE_MAX", [3] = "ALL_REDUCE_MIN" }
local OP_SHORT = { [1] = "SUM", [2] = "MAX", [3] = "MIN" }
local DTYPES = { [1] = "f32", [2] = "f16", [3] = "bf16", [4] = "i32" }
local DTYPE_SIZE = { [1] = 4, [2] = 2, [3] = 2, [4] = 4 }
-- Spec section 5.
local NAK_REASONS = {
    [1] = "Unknown collective",
    [2] = "Bad version",
    [3] = "Op, dtype or carriage mismatch",
    [4] = "Bad rank",
    [5] = "Not the rank's member",
    [6] = "Bad length or offset",
    [7] = "Stale or premature round",
}
-- Spec section 7: the reason byte of a STATUS.
local SLOT_STATES = {
    [0] = "No history: the first contribution sets the round",
    [1] = "Round in progress, this rank's contribution missing",
    [2] = "Round in progress, this rank's contribution in",
    [3] = "Round completed, none in progress",
}
-- Flag combinations the spec defines: contribution, RESULT, RETRANSMIT, NAK, PROBE,
-- PROBE|RETRANSMIT, STATUS (RESULT|PROBE).
local VALID_FLAGS = { [0] = true, [1] = true, [2] = true, [4] = true, [8] = true, [9] = true, [10] = true }

local f = grad.fields
f.version = ProtoField.uint8("grad.version", "Version", base.DEC, nil, 0xf0)
f.flags = ProtoField.uint8("grad.flags", "Flags", base.HEX, nil, 0x0f)
f.flag_probe = ProtoField.bool("grad.flags.probe", "PROBE", 8, nil, FLAG_PROBE)
f.flag_nak = ProtoField.bool("grad.flags.nak", "NAK", 8, nil, FLAG_NAK)
f.flag_retransmit = ProtoField.bool("grad.flags.retransmit", "RETRANSMIT", 8, nil, FLAG_RETRANSMIT)
f.flag_result = ProtoField.bool("grad.flags.result", "RESULT", 8, nil, FLAG_RESULT)
f.op = ProtoField.uint8("grad.op", "Operation (op_type)", base.HEX, OPS)
f.collective = ProtoField.uint16("grad.collective_id", "Collective", base.DEC)
f.dtype = ProtoField.uint8("grad.dtype", "Element type (dtype)", base.HEX, DTYPES)
f.reason = ProtoField.uint8("grad.reason", "Reason", base.DEC)
f.nak_reason = ProtoField.uint8("grad.nak_reason", "NAK reason", base.DEC, NAK_REASONS)
f.slot_state = ProtoField.uint8("grad.slot_state", "Slot state", base.DEC, SLOT_STATES)
f.rank = ProtoField.uint16("grad.worker_rank", "Worker rank", base.DEC)
f.offset = ProtoField.uint32("grad.tensor_offset", "Tensor offset (elements)", base.DEC)
f.data_length = ProtoField.uint32("grad.data_length", "Data length (bytes)", base.DEC)
f.round = ProtoField.uint32("grad.round", "Round", base.DEC)
f.kind = ProtoField.string("grad.kind", "Packet kind")
f.carriage = ProtoField.string("grad.carriage", "Carriage")
f.payload = ProtoField.bytes("grad.payload", "Payload")
f.elements = ProtoField.uint32("grad.elements", "Elements", base.DEC)
f.lane_f32 = ProtoField.double("grad.lane.f32", "f32 lane")
f.lane_f16 = ProtoField.double("grad.lane.f16", "f16 lane")
f.lane_bf16 = ProtoField.double("grad.lane.bf16", "bf16 lane")
f.lane_i32 = ProtoField.int32("grad.lane.i32", "i32 lane", base.DEC)
f.status_rank = ProtoField.uint16("grad.status.rank_in", "Contribution in from rank", base.DEC)
f.status_count = ProtoField.uint16("grad.status.ranks_in", "Ranks whose contribution is in", base.DEC)
f.padding = ProtoField.bytes("grad.padding", "Pad (RoCEv2)")
f.trailing = ProtoField.bytes("grad.trailing", "Bytes past data_length")

-- Expert infos, keyed by short names; each call adds those of one group and severity (names
-- under expert.group and expert.severity), from { abbreviation, text } pairs.
local e = {}
local function experts(group, severity, infos)
    for key, info in pairs(infos) do
        e[key] = ProtoExpert.new(info[1], info[2], expert.group[group], expert.severity[severity])
    end
end
experts("MALFORMED", "ERROR", {
    short = { "grad.short", "Gradient header truncated (fewer than 20 bytes)" },
    version = { "grad.version.unknown", "Unknown version (this protocol is version 1)" },
    op = { "grad.op.unknown", "Unknown op_type" },
    dtype = { "grad.dtype.unknown", "Unknown dtype" },
    past_end = { "grad.data_length.past_end", "data_length runs past the bytes present" },
})
experts("MALFORMED", "WARN", {
    multiple = { "grad.data_length.not_multiple", "data_length is not a multiple of the dtype size" },
    trailing = { "grad.trailing.present", "Bytes past data_length" },
    pad = { "grad.padding.bad", "Pad does not match the BTH PadCnt or the multiple of 4" },
})
experts("PROTOCOL", "WARN", {
    flags = { "grad.flags.invalid", "Flag combination the spec does not define" },
    rank = { "grad.worker_rank.not_none", "An aggregator's packet carries worker_rank 0xFFFF" },
    nak_len = { "grad.nak.data_length", "A NAK carries data_length 0" },
    reason = { "grad.reason.unknown", "Reason or slot state the spec does not define" },
})
experts("RESPONSE_CODE", "NOTE", { nak = { "grad.nak", "NAK: the aggregator refused a contribution" } })
grad.experts = { e.short, e.version, e.op, e.dtype, e.flags, e.past_end, e.multiple, e.trailing, e.pad,
    e.rank, e.nak_len, e.reason, e.nak }

grad.prefs.udp_port = Pref.uint("UDP port", DEFAULT_UDP_PORT,
    "UDP port of the UDP carriage (gradient_udp_port; 0 turns the UDP carriage off)")
grad.prefs.lanes = Pref.uint("Lanes shown", 8, "How many payload lanes to decode per packet")

-- Fields of the InfiniBand dissector the RoCEv2 carriage needs.
local ib_opcode = Field.new("infiniband.bth.opcode")
local ib_padcnt = Field.new("infiniband.bth.padcnt")
local ib_destqp = Field.new("infiniband.bth.destqp")
local ib_deth = Field.new("infiniband.deth")
local ib_srcqp = Field.new("infiniband.deth.srcqp")
local udp_field = Field.new("udp")
local udp_length = Field.new("udp.length")
local udp_dstport = Field.new("udp.dstport")

-- The last occurrence of a field in this frame (the innermost layer), or nil.
local function last(field)
    local all = { field() }
    return all[#all]
end

-- A 16-bit float's bits to a number: a sign bit, `eb` exponent bits (bias 2^(eb-1) - 1) and
-- 15 - eb mantissa bits. IEEE binary16 has eb = 5; bfloat16 (the top half of a binary32), 8.
local function from_half(u, eb)
    local mb = 15 - eb
    local bias = 2 ^ (eb - 1) - 1
    local sign = (u >= 0x8000) and -1 or 1
    local exp = math.floor(u / 2 ^ mb) % 2 ^ eb
    local man = u % 2 ^ mb
    if exp == 0 then return sign * man * 2 ^ (1 - bias - mb) end
    if exp == 2 ^ eb - 1 then return (man == 0) and sign * math.huge or 0 / 0 end
    return sign * (1 + man / 2 ^ mb) * 2 ^ (exp - bias)
end

local function from_f16(u) return from_half(u, 5) end
local function from_bf16(u) return from_half(u, 8) end

local function kind_of(flags)
    if flags == FLAG_NAK then return "NAK" end
    if flags == FLAG_RESULT + FLAG_PROBE then return "STATUS" end
    if flags == FLAG_PROBE or flags == FLAG_PROBE + FLAG_RETRANSMIT then return "PROBE" end
    if flags == FLAG_RESULT then return "RESULT" end
    if flags == 0 or flags == FLAG_RETRANSMIT then return "CONTRIBUTION" end
    return "INVALID"
end

-- The checks the RoCEv2 heuristic makes: a version-1 header with a known op, dtype and flag
-- combination, whose data_length leaves at most 3 bytes (the pad) of `avail` (the bytes the
-- packet holds, captured or not: a capture cut by its snaplen is judged by its reported length).
local function plausible(tvb, avail)
    if avail < HEADER_LEN or tvb:captured_len() < HEADER_LEN then return false end
    local b0 = tvb(0, 1):uint()
    if math.floor(b0 / 16) ~= VERSION or not VALID_FLAGS[b0 % 16] then return false end
    if not OPS[tvb(1, 1):uint()] or not DTYPES[tvb(4, 1):uint()] then return false end
    local rest = avail - HEADER_LEN - tvb(12, 4):uint()
    return rest >= 0 and rest <= 3
end

-- Marks a packet cut by the capture's snaplen the way Wireshark does ("Packet size limited
-- during capture"): what was captured is shown, and nothing is called malformed for the bytes
-- the capture left out.
local function size_limited(t, tvb, pinfo)
    t:add(tvb(0, 0), "[Packet size limited during capture: GRAD truncated]")
    pinfo.cols.info:append(" [Packet size limited during capture]")
end

-- Dissects a gradient header at the start of `tvb`. `carriage` is "UDP" or "RoCEv2"; `padcnt`
-- the BTH PadCnt on RoCEv2; `reported` the bytes the packet holds from the header on (its
-- length on the wire; more than `tvb:captured_len()` when the capture cut it). Returns the bytes
-- consumed.
local function dissect(tvb, pinfo, tree, carriage, padcnt, reported)
    local len = tvb:captured_len()
    reported = math.max(reported or tvb:reported_len(), len)
    pinfo.cols.protocol:set("GRAD")
    local t = tree:add(grad, tvb())
    t:add(f.carriage, carriage):set_generated()
    if reported < HEADER_LEN then
        t:add_proto_expert_info(e.short, string.format("Gradient header truncated: %d of 20 bytes", reported))
        pinfo.cols.info:set(string.format("Gradient header truncated (%d bytes)", reported))
        return len
    end
    if len < HEADER_LEN then
        pinfo.cols.info:set(string.format("Gradient header, %d of 20 bytes captured", len))
        size_limited(t, tvb, pinfo)
        return len
    end

    local b0 = tvb(0, 1):uint()
    local version, flags = math.floor(b0 / 16), b0 % 16
    local op, coll, dtype = tvb(1, 1):uint(), tvb(2, 2):uint(), tvb(4, 1):uint()
    local reason, rank = tvb(5, 1):uint(), tvb(6, 2):uint()
    local offset, dlen, round = tvb(8, 4):uint(), tvb(12, 4):uint(), tvb(16, 4):uint()
    local kind = kind_of(flags)

    local vi = t:add(f.version, tvb(0, 1))
    if version ~= VERSION then vi:add_proto_expert_info(e.version) end
    local fi = t:add(f.flags, tvb(0, 1))
    fi:append_text(" (" .. kind .. ")")
    local ft = fi
    ft:add(f.flag_probe, tvb(0, 1))
    ft:add(f.flag_nak, tvb(0, 1))
    ft:add(f.flag_retransmit, tvb(0, 1))
    ft:add(f.flag_result, tvb(0, 1))
    if kind == "INVALID" then fi:add_proto_expert_info(e.flags) end
    t:add(f.kind, kind):set_generated()
    local oi = t:add(f.op, tvb(1, 1))
    if not OPS[op] then oi:add_proto_expert_info(e.op) end
    t:add(f.collective, tvb(2, 2))
    local di = t:add(f.dtype, tvb(4, 1))
    if not DTYPES[dtype] then di:add_proto_expert_info(e.dtype) end

    if kind == "NAK" then
        local ri = t:add(f.nak_reason, tvb(5, 1))
        if not NAK_REASONS[reason] then ri:add_proto_expert_info(e.reason) end
        t:add_proto_expert_info(e.nak, "NAK: " .. (NAK_REASONS[reason] or ("reason " .. reason)))
    elseif kind == "STATUS" then
        local ri = t:add(f.slot_state, tvb(5, 1))
        if not SLOT_STATES[reason] then ri:add_proto_expert_info(e.reason) end
    else
        t:add(f.reason, tvb(5, 1))
    end

    local rki = t:add(f.rank, tvb(6, 2))
    if rank == RANK_NONE then rki:append_text(" (none: the aggregator's packets)") end
    if (kind == "RESULT" or kind == "NAK" or kind == "STATUS") and rank ~= RANK_NONE then
        rki:add_proto_expert_info(e.rank)
    end
    t:add(f.offset, tvb(8, 4))
    local dli = t:add(f.data_length, tvb(12, 4))
    local rdi = t:add(f.round, tvb(16, 4))
    if kind == "NAK" and reason == 7 then
        rdi:append_text(" (the round the slot accepts from this rank now)")
    elseif kind == "STATUS" then
        local what = { [0] = " (no history)", [1] = " (round in progress)", [2] = " (round in progress)",
            [3] = " (completed round + 1)" }
        rdi:append_text(what[reason] or "")
    elseif kind == "PROBE" then
        rdi:append_text(" (ignored)")
    end
    if kind == "NAK" and dlen ~= 0 then dli:add_proto_expert_info(e.nak_len) end

    -- Payload: data_length bytes, of which `have` are captured; `avail` bytes follow the header
    -- in the packet, `captured` of them in the capture.
    local avail, captured = reported - HEADER_LEN, len - HEADER_LEN
    local have = math.min(dlen, avail, captured)
    local cut = len < reported
    if dlen > avail then
        dli:add_proto_expert_info(e.past_end, string.format("data_length %d runs past the %d bytes present",
            dlen, avail))
    end
    local size = DTYPE_SIZE[dtype]
    local lanes_text = ""
    if have > 0 then
        local pi = t:add(f.payload, tvb(HEADER_LEN, have))
        if kind == "STATUS" then
            local n, ranks = 0, {}
            for i = 0, math.min(have, 1024) - 1 do
                local byte = tvb(HEADER_LEN + i, 1):uint()
                for bit = 0, 7 do
                    if math.floor(byte / 2 ^ bit) % 2 == 1 then
                        local r = i * 8 + bit
                        n = n + 1
                        ranks[#ranks + 1] = tostring(r)
                        pi:add(f.status_rank, tvb(HEADER_LEN + i, 1), r):set_generated()
                    end
                end
            end
            pi:append_text(" (bitmap of the ranks whose contribution is in)")
            t:add(f.status_count, n):set_generated()
            lanes_text = " ranks in: [" .. table.concat(ranks, ",") .. "]"
        elseif kind == "PROBE" then
            pi:append_text(" (ignored: ceil(num_workers / 8) bytes so that the STATUS is no longer)")
        elseif size then
            if dlen % size ~= 0 then dli:add_proto_expert_info(e.multiple) end
            t:add(f.elements, math.floor(dlen / size)):set_generated()
            local shown = math.min(math.floor(have / size), grad.prefs.lanes)
            local vals = {}
            for i = 0, shown - 1 do
                local r = tvb(HEADER_LEN + i * size, size)
                local v, field
                if dtype == 1 then
                    v, field = r:le_float(), f.lane_f32
                elseif dtype == 2 then
                    v, field = from_f16(r:le_uint()), f.lane_f16
                elseif dtype == 3 then
                    v, field = from_bf16(r:le_uint()), f.lane_bf16
                else
                    v, field = r:le_int(), f.lane_i32
                end
                local text = (dtype == 4) and tostring(v) or string.format("%.9g", v)
                vals[#vals + 1] = text
                pi:add(field, r, v, string.format("Lane %d (element %d): %s", i, offset + i, text))
            end
            if shown > 0 then
                lanes_text = " [" .. table.concat(vals, ", ") .. ((shown * size < dlen) and ", ...]" or "]")
            end
        end
    elseif size and kind ~= "NAK" and kind ~= "PROBE" and kind ~= "STATUS" then
        t:add(f.elements, 0):set_generated()
    end

    -- What follows data_length: nothing on UDP (its length is 8 + 20 + data_length), the pad on
    -- RoCEv2 (PadCnt bytes, making header + payload a multiple of 4). `extra` counts them in the
    -- packet; the item shows the captured ones (none: the item is left out).
    local body = math.min(dlen, avail)
    local extra = avail - body
    local extra_have = math.max(0, math.min(extra, captured - body))
    if extra > 0 then
        if carriage == "RoCEv2" then
            local bad = extra ~= padcnt or (HEADER_LEN + dlen + extra) % 4 ~= 0
            if extra_have > 0 then
                local pi = t:add(f.padding, tvb(HEADER_LEN + body, extra_have))
                if bad then pi:add_proto_expert_info(e.pad) end
            elseif bad then
                t:add_proto_expert_info(e.pad)
            end
        else
            local ti = extra_have > 0 and t:add(f.trailing, tvb(HEADER_LEN + body, extra_have)) or t
            ti:add_proto_expert_info(e.trailing,
                string.format("%d bytes past data_length: UDP length must be 8 + 20 + data_length", extra))
        end
    elseif carriage == "RoCEv2" and padcnt and padcnt ~= 0 and dlen <= avail then
        t:add_proto_expert_info(e.pad)
    end

    -- Summary: the tree item and the Info column.
    local what = kind
    if kind == "NAK" then
        what = string.format("NAK %d (%s)", reason, NAK_REASONS[reason] or "unknown")
    elseif kind == "STATUS" then
        what = string.format("STATUS %d (%s)", reason, SLOT_STATES[reason] or "unknown")
    elseif kind == "CONTRIBUTION" and flags == FLAG_RETRANSMIT then
        what = "CONTRIBUTION (RETRANSMIT)"
    end
    local rank_text = (rank == RANK_NONE) and "" or string.format(" rank=%d", rank)
    local summary = string.format("%s coll=%d%s %s %s offset=%d len=%d round=%d", what, coll, rank_text,
        OP_SHORT[op] or string.format("op=0x%02x", op), DTYPES[dtype] or string.format("dtype=0x%02x", dtype),
        offset, dlen, round)
    if version ~= VERSION then summary = string.format("version %d! ", version) .. summary end
    t:append_text(", " .. summary)
    pinfo.cols.info:set(summary .. lanes_text)
    if cut then size_limited(t, tvb, pinfo) end
    return len
end

-- UDP carriage: whatever reaches the port is shown, with expert info when it is malformed.
function grad.dissector(tvb, pinfo, tree)
    return dissect(tvb, pinfo, tree, "UDP", nil, tvb:reported_len())
end

local claimed = {} -- frame numbers whose gradient header the heuristic dissected

-- RoCEv2 carriage: the payload of an InfiniBand SEND (header, payload and pad; no ICRC).
local function heuristic(tvb, pinfo, tree)
    local opcode = last(ib_opcode)
    if not opcode or opcode.value ~= UD_SEND_ONLY then return false end
    if not plausible(tvb, tvb:reported_len()) then return false end
    local padcnt = last(ib_padcnt)
    dissect(tvb, pinfo, tree, "RoCEv2", padcnt and padcnt.value or 0, tvb:reported_len())
    claimed[pinfo.number] = true
    return true
end
grad:register_heuristic("infiniband.payload", heuristic)

-- RoCEv2 to or from QP 0 or 1: Wireshark parses a management datagram and calls no payload
-- heuristic. The gradient header follows the DETH and runs up to the ICRC (the UDP datagram's
-- last 4 bytes); the same checks as the heuristic's decide.
local grad_gsi = Proto("grad_gsi", "Gradient header on RoCEv2 QP 0/1")
function grad_gsi.dissector(tvb, pinfo, tree)
    if claimed[pinfo.number] then return end
    local opcode, qp, srcqp, deth = last(ib_opcode), last(ib_destqp), last(ib_srcqp), last(ib_deth)
    if not opcode or opcode.value ~= UD_SEND_ONLY or not qp or not srcqp or not deth then return end
    if qp.value > 1 and srcqp.value > 1 then return end
    local udp, ulen, dport = last(udp_field), last(udp_length), last(udp_dstport)
    if not udp or not ulen or not dport or dport.value ~= 4791 then return end
    local start = deth.offset + deth.len
    local stop = udp.offset + ulen.value - 4 -- the ICRC
    if start >= tvb:captured_len() or stop <= start then return end
    local avail = stop - start
    local sub = tvb(start, math.min(avail, tvb:captured_len() - start)):tvb()
    if not plausible(sub, avail) then return end
    local padcnt = last(ib_padcnt)
    dissect(sub, pinfo, tree, "RoCEv2", padcnt and padcnt.value or 0, avail)
end
register_postdissector(grad_gsi)

-- The UDP port preference.
local registered_port = 0
local function register_port()
    local port = grad.prefs.udp_port
    if port == registered_port then return end
    local udp_table = DissectorTable.get("udp.port")
    if registered_port ~= 0 then udp_table:remove(registered_port, grad) end
    if port ~= 0 then udp_table:add(port, grad) end
    registered_port = port
end
grad.prefs_changed = register_port
register_port()

function grad.init()
    claimed = {}
end
