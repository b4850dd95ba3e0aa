// Type-checked by tsc in .ci/contract against the types openapi-typescript
// generates from openapi/v2.yaml into ./generated/v2.d.ts. Never run: it
// fails to compile when the document stops describing what integrators rely
// on. Every `@ts-expect-error` line must be an error, so the contract's
// constraints (required fields, enums, error codes per status) are checked
// too, not only that the types exist.

import type { components, paths } from "./generated/v2";

type Json = "application/json; charset=utf-8";
type Balance = paths["/v2/master-account/balance"]["get"];
type Complete = paths["/v2/payment/order/complete"]["post"];

type BalanceQuery = Balance["parameters"]["query"];
type BalanceOk = Balance["responses"][200]["content"][Json];
type BalanceBadRequest = Balance["responses"][400]["content"][Json];
type BalanceForbidden = Balance["responses"][403]["content"][Json];
type BalanceNotFound = Balance["responses"][404]["content"][Json];
type BalanceInternal = Balance["responses"][500]["content"][Json];
type BalanceUnavailable = Balance["responses"][503]["content"][Json];

type CompleteBody = Complete["requestBody"]["content"]["application/json"];
type CompleteOk = Complete["responses"][200]["content"][Json];
type CompleteBadRequest = Complete["responses"][400]["content"][Json];
type CompleteForbidden = Complete["responses"][403]["content"][Json];
type CompleteNotFound = Complete["responses"][404]["content"][Json];
type CompleteConflict = Complete["responses"][409]["content"][Json];
type CompleteTimeout = Complete["responses"][408]["content"][Json];
type CompleteTooLarge = Complete["responses"][413]["content"][Json];
type CompleteFailed = Complete["responses"][500]["content"][Json];
type CompleteUnavailable = Complete["responses"][503]["content"][Json];

type Create = paths["/v2/payment/order/create"]["post"];
type Read = paths["/v2/payment/order"]["get"];
type Cancel = paths["/v2/payment/order/cancel"]["post"];
type History = paths["/v2/master-account/operations"]["get"];

type CreateHeaders = NonNullable<Create["parameters"]["header"]>;
type CreateBody = Create["requestBody"]["content"]["application/json"];
type CreateCreated = Create["responses"][201]["content"][Json];
type CreateCreatedHeaders = Create["responses"][201]["headers"];
type CreateBadRequest = Create["responses"][400]["content"][Json];
type CreateForbidden = Create["responses"][403]["content"][Json];
type CreateNotFound = Create["responses"][404]["content"][Json];
type CreateTimeout = Create["responses"][408]["content"][Json];
type CreateConflict = Create["responses"][409]["content"][Json];
type CreateTooLarge = Create["responses"][413]["content"][Json];
type CreateInternal = Create["responses"][500]["content"][Json];
type CreateUnavailable = Create["responses"][503]["content"][Json];

type ReadQuery = Read["parameters"]["query"];
type ReadOk = Read["responses"][200]["content"][Json];
type ReadBadRequest = Read["responses"][400]["content"][Json];
type ReadForbidden = Read["responses"][403]["content"][Json];
type ReadNotFound = Read["responses"][404]["content"][Json];
type ReadInternal = Read["responses"][500]["content"][Json];
type ReadUnavailable = Read["responses"][503]["content"][Json];

type CancelBody = Cancel["requestBody"]["content"]["application/json"];
type CancelOk = Cancel["responses"][200]["content"][Json];
type CancelBadRequest = Cancel["responses"][400]["content"][Json];
type CancelForbidden = Cancel["responses"][403]["content"][Json];
type CancelNotFound = Cancel["responses"][404]["content"][Json];
type CancelTimeout = Cancel["responses"][408]["content"][Json];
type CancelConflict = Cancel["responses"][409]["content"][Json];
type CancelTooLarge = Cancel["responses"][413]["content"][Json];
type CancelInternal = Cancel["responses"][500]["content"][Json];
type CancelUnavailable = Cancel["responses"][503]["content"][Json];

type HistoryQuery = NonNullable<History["parameters"]["query"]>;
type HistoryOk = History["responses"][200]["content"][Json];
type HistoryBadRequest = History["responses"][400]["content"][Json];
type HistoryForbidden = History["responses"][403]["content"][Json];
type HistoryNotFound = History["responses"][404]["content"][Json];
type HistoryInternal = History["responses"][500]["content"][Json];
type HistoryUnavailable = History["responses"][503]["content"][Json];

type Schemas = components["schemas"];
type PaymentOrder = Schemas["PaymentOrder"];
type PaymentOrderStatus = Schemas["PaymentOrderStatus"];
type CreateOrderRequest = Schemas["CreateOrderRequest"];
type CancelOrderRequest = Schemas["CancelOrderRequest"];
type OperationsPage = Schemas["OperationsPage"];
type Operation = Schemas["Operation"];
type CancelConflictBody = Schemas["CancelConflictBody"];
type IdempotencyConflictBody = Schemas["IdempotencyConflictBody"];

// `true` only when A and B are the same type.
type Same<A, B> =
  (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;

// ------------------------------------------------------------------ balance

export const byId: BalanceQuery = { server_id: 0, user_id: 1 };
export const byEmail: BalanceQuery = {
  server_id: 3,
  email: "player@example.com",
  balance_type: "bonus",
};
// @ts-expect-error server_id is required
export const noServer: BalanceQuery = { user_id: 1 };
// @ts-expect-error balance_type is main or bonus
export const badType: BalanceQuery = { server_id: 0, user_id: 1, balance_type: "both" };

export const both: BalanceOk = { success: true, main_balance: "1250.50", bonus_balance: "25.00" };
export const mainOnly: BalanceOk = { success: true, main_balance: "1250.50" };
// @ts-expect-error balances are decimal strings, never numbers
export const floaty: BalanceOk = { success: true, main_balance: 1250.5 };

export const invalid: BalanceBadRequest = {
  success: false,
  code: "VALIDATION_ERROR",
  message: { user_id: "user_id is required when email is empty" },
};
export const refused: BalanceForbidden = { success: false, code: "TOKEN_DISABLED" };
export const noUser: BalanceNotFound = { success: false, code: "USER_NOT_FOUND" };
export const noServerFound: BalanceNotFound = { success: false, code: "SERVER_NOT_FOUND" };
// @ts-expect-error ORDER_NOT_FOUND is not a code of the balance endpoint's 404
export const wrong404: BalanceNotFound = { success: false, code: "ORDER_NOT_FOUND" };
export const internal: BalanceInternal = { success: false, code: "INTERNAL_ERROR" };
export const busy: BalanceUnavailable = { success: false, code: "SERVICE_UNAVAILABLE" };

// ------------------------------------------------------------------ complete

export const webhook: CompleteBody = {
  payment_system: "cstm:paygate",
  order_id: "Order:AbC123xYz",
  payment_id: "pay_8f2c1a",
};
export const withoutPaymentId: CompleteBody = {
  payment_system: "cstm:paygate",
  order_id: "Order:AbC123xYz",
  payment_id: null,
};
// @ts-expect-error order_id is required
export const noOrder: CompleteBody = { payment_system: "cstm:paygate" };

export const completed: CompleteOk = {
  success: true,
  order_id: "Order:AbC123xYz",
  payment_system: "cstm:paygate",
  payment_id: null,
  status: "completed",
  amount: "10.25",
  completed_at: "2026-11-22T10:15:30.123456+00:00",
};
// @ts-expect-error status is always "completed"
export const pending: CompleteOk = { ...completed, status: "pending" };

export const badBody: CompleteBadRequest = {
  success: false,
  code: "VALIDATION_ERROR",
  message: { order_id: "order_id is required" },
};
export const denied: CompleteForbidden = { success: false, code: "ACCESS_DENIED" };
export const noOrderFound: CompleteNotFound = { success: false, code: "ORDER_NOT_FOUND" };
export const duplicate: CompleteConflict = { success: false, code: "ORDER_ALREADY_COMPLETED" };
export const completingCancelled: CompleteConflict = { success: false, code: "ORDER_CANCELLED" };
// @ts-expect-error 409 carries only ORDER_ALREADY_COMPLETED or ORDER_CANCELLED
export const wrong409: CompleteConflict = { success: false, code: "ORDER_NOT_FOUND" };
// @ts-expect-error ORDER_ALREADY_CANCELLED is the cancellation's code, not the completion's
export const cancelsCode409: CompleteConflict = { success: false, code: "ORDER_ALREADY_CANCELLED" };
// Exactly these codes: a missing one or an extra one fails to compile.
export const alreadyCompletedCodes: Record<Schemas["AlreadyCompletedCode"], true> = {
  ORDER_ALREADY_COMPLETED: true,
  ORDER_CANCELLED: true,
};
export const completeSlow: CompleteTimeout = { success: false, code: "REQUEST_TIMEOUT" };
export const tooLarge: CompleteTooLarge = { success: false, code: "PAYLOAD_TOO_LARGE" };
export const updateFailed: CompleteFailed = { success: false, code: "ORDER_UPDATE_FAILED" };
export const unavailable: CompleteUnavailable = {
  success: false,
  code: "PAYMENT_PROCESSING_ERROR",
};

// ------------------------------------------------------------------ the order's schemas

export const createIsPaymentOrder: Same<CreateCreated, PaymentOrder> = true;
export const readIsPaymentOrder: Same<ReadOk, PaymentOrder> = true;
export const cancelIsPaymentOrder: Same<CancelOk, PaymentOrder> = true;
export const createBodyIsRequest: Same<CreateBody, CreateOrderRequest> = true;
export const cancelBodyIsRequest: Same<CancelBody, CancelOrderRequest> = true;
export const historyIsPage: Same<HistoryOk, OperationsPage> = true;
export const pageHoldsOperations: Same<OperationsPage["operations"], Operation[]> = true;
export const createConflictBody: Same<CreateConflict, IdempotencyConflictBody> = true;
export const cancelConflictBody: Same<CancelConflict, CancelConflictBody> = true;

// Exactly these values: a missing one or an extra one fails to compile.
export const statuses: Record<PaymentOrderStatus, true> = {
  pending: true,
  completed: true,
  cancelled: true,
};
export const kinds: Record<Schemas["OperationKind"], true> = { order_credit: true, balance_set: true };
export const balanceTypes: Record<Schemas["OperationBalanceType"], true> = { main: true, bonus: true };
export const cancelConflictCodes: Record<Schemas["CancelConflictCode"], true> = {
  ORDER_ALREADY_COMPLETED: true,
  ORDER_ALREADY_CANCELLED: true,
};
export const idempotencyConflictCodes: Record<Schemas["IdempotencyConflictCode"], true> = {
  IDEMPOTENCY_KEY_REUSED: true,
};

// ------------------------------------------------------------------ create

export const forAlice: CreateBody = {
  user_id: 1,
  server_id: 0,
  amount: "10.25",
  payment_system: "cstm:paygate",
};
export const forAliceByEmail: CreateBody = {
  user_id: null,
  email: "alice1@example.com",
  server_id: 3,
  amount: "5",
  payment_system: "cstm:paygate",
};
// @ts-expect-error amounts are decimal strings, never numbers
export const numericAmount: CreateBody = { ...forAlice, amount: 10.25 };
// @ts-expect-error server_id is required
export const noServerId: CreateBody = { user_id: 1, amount: "1.00", payment_system: "cstm:paygate" };
// @ts-expect-error amount is required
export const noAmount: CreateBody = { user_id: 1, server_id: 0, payment_system: "cstm:paygate" };
// @ts-expect-error payment_system is required
export const noPaymentSystem: CreateBody = { user_id: 1, server_id: 0, amount: "1.00" };
// @ts-expect-error no other field is accepted
export const extraField: CreateBody = { ...forAlice, order_id: "Order:AbC123xYz" };

export const withKey: CreateHeaders = { "Idempotency-Key": "3f9c2a7e-5b1d-4c8e-9a60-2d4b8f1e7c35" };
export const withoutKey: CreateHeaders = {};
// @ts-expect-error the Idempotency-Key is a string
export const numericKey: CreateHeaders = { "Idempotency-Key": 42 };

export const created: CreateCreated = {
  success: true,
  order_id: "Order:AbC123xYz",
  status: "pending",
  user_id: 1,
  server_id: 0,
  amount: "10.25",
  payment_system: "cstm:paygate",
  payment_id: null,
  created_at: "2026-11-22T10:15:30.123456+00:00",
  completed_at: null,
  cancelled_at: null,
};
// @ts-expect-error status is pending, completed or cancelled
export const paid: CreateCreated = { ...created, status: "paid" };
// @ts-expect-error order amounts are decimal strings, never numbers
export const numericOrderAmount: CreateCreated = { ...created, amount: 10.25 };
const { order_id: _dropped, ...withoutOrderId } = created;
// @ts-expect-error order_id is required
export const noOrderId: CreateCreated = withoutOrderId;

export const replayed: CreateCreatedHeaders = { "Idempotent-Replayed": true };
export const firstTime: CreateCreatedHeaders = {};
// @ts-expect-error Idempotent-Replayed is a boolean
export const replayedNumber: CreateCreatedHeaders = { "Idempotent-Replayed": 1 };

export const createInvalid: CreateBadRequest = {
  success: false,
  code: "VALIDATION_ERROR",
  message: { amount: "amount must be at least 0.01", "Idempotency-Key": "too long" },
};
export const createDenied: CreateForbidden = { success: false, code: "ACCESS_DENIED" };
export const createNoUser: CreateNotFound = { success: false, code: "USER_NOT_FOUND" };
export const createNoServer: CreateNotFound = { success: false, code: "SERVER_NOT_FOUND" };
// @ts-expect-error ORDER_NOT_FOUND is not a code of creation's 404
export const createWrong404: CreateNotFound = { success: false, code: "ORDER_NOT_FOUND" };
export const createSlow: CreateTimeout = { success: false, code: "REQUEST_TIMEOUT" };
export const keyReused: CreateConflict = { success: false, code: "IDEMPOTENCY_KEY_REUSED" };
// @ts-expect-error 409 carries only IDEMPOTENCY_KEY_REUSED
export const createWrong409: CreateConflict = { success: false, code: "ORDER_ALREADY_COMPLETED" };
export const createTooLarge: CreateTooLarge = { success: false, code: "PAYLOAD_TOO_LARGE" };
export const createInternal: CreateInternal = { success: false, code: "INTERNAL_ERROR" };
export const createBusy: CreateUnavailable = { success: false, code: "SERVICE_UNAVAILABLE" };

// ------------------------------------------------------------------ read

export const readQuery: ReadQuery = { order_id: "Order:AbC123xYz" };
// @ts-expect-error order_id is required
export const readNothing: ReadQuery = {};

export const read: ReadOk = {
  ...created,
  status: "completed",
  payment_id: "pay_8f2c1a",
  completed_at: "2026-11-22T10:16:02.000001+00:00",
};
// The nullable fields may also be absent.
export const readMinimal: ReadOk = {
  success: true,
  order_id: "Order:AbC123xYz",
  status: "pending",
  user_id: 1,
  server_id: 0,
  amount: "10.25",
  payment_system: "cstm:paygate",
  created_at: "2026-11-22T10:15:30.123456+00:00",
};
export const readInvalid: ReadBadRequest = {
  success: false,
  code: "VALIDATION_ERROR",
  message: { order_id: "order_id is required" },
};
export const readDenied: ReadForbidden = { success: false, code: "TOKEN_NOT_FOUND" };
export const readMissing: ReadNotFound = { success: false, code: "ORDER_NOT_FOUND" };
// @ts-expect-error USER_NOT_FOUND is not a code of the order read's 404
export const readWrong404: ReadNotFound = { success: false, code: "USER_NOT_FOUND" };
export const readInternal: ReadInternal = { success: false, code: "INTERNAL_ERROR" };
export const readBusy: ReadUnavailable = { success: false, code: "SERVICE_UNAVAILABLE" };

// ------------------------------------------------------------------ cancel

export const cancelBody: CancelBody = { order_id: "Order:AbC123xYz", payment_system: "cstm:paygate" };
// @ts-expect-error payment_system is required
export const cancelNoSystem: CancelBody = { order_id: "Order:AbC123xYz" };
// @ts-expect-error no other field is accepted
export const cancelExtra: CancelBody = { ...cancelBody, payment_id: "pay_8f2c1a" };

export const cancelled: CancelOk = {
  ...created,
  status: "cancelled",
  cancelled_at: "2026-11-22T10:20:00+00:00",
};
export const cancelInvalid: CancelBadRequest = {
  success: false,
  code: "VALIDATION_ERROR",
  message: { body: "the body must be a JSON object" },
};
export const cancelDenied: CancelForbidden = { success: false, code: "EMPTY_ACCESS" };
export const cancelMissing: CancelNotFound = { success: false, code: "ORDER_NOT_FOUND" };
export const cancelSlow: CancelTimeout = { success: false, code: "REQUEST_TIMEOUT" };
export const cancelTooLate: CancelConflict = { success: false, code: "ORDER_ALREADY_COMPLETED" };
export const cancelTwice: CancelConflict = { success: false, code: "ORDER_ALREADY_CANCELLED" };
// @ts-expect-error ORDER_CANCELLED is the completion's code, not the cancellation's
export const cancelWrong409: CancelConflict = { success: false, code: "ORDER_CANCELLED" };
export const cancelTooLarge: CancelTooLarge = { success: false, code: "PAYLOAD_TOO_LARGE" };
export const cancelInternal: CancelInternal = { success: false, code: "INTERNAL_ERROR" };
export const cancelBusy: CancelUnavailable = { success: false, code: "SERVICE_UNAVAILABLE" };

// ------------------------------------------------------------------ operations

export const historyById: HistoryQuery = { user_id: 1 };
export const historyPage: HistoryQuery = {
  email: "alice1@example.com",
  server_id: 0,
  limit: 100,
  cursor: "000000000000002a5c0b7e61d9a4f3c2b1e08d7a",
};
// @ts-expect-error limit is a number
export const textLimit: HistoryQuery = { user_id: 1, limit: "20" };

export const credit: Operation = {
  id: 42,
  kind: "order_credit",
  server_id: 0,
  balance_type: "main",
  amount: "10.25",
  balance_before: "1240.25",
  balance_after: "1250.50",
  order_id: "Order:AbC123xYz",
  created_at: "2026-11-22T10:15:30.123456+00:00",
};
export const setByOperator: Operation = {
  ...credit,
  id: 41,
  kind: "balance_set",
  balance_type: "bonus",
  amount: "-5.00",
  order_id: null,
};
// @ts-expect-error kind is order_credit or balance_set
export const refund: Operation = { ...credit, kind: "refund" };
// @ts-expect-error balance_type is main or bonus
export const bothBalances: Operation = { ...credit, balance_type: "both" };
// @ts-expect-error amounts are decimal strings, never numbers
export const numericChange: Operation = { ...credit, amount: 10.25 };
const { balance_before: _before, ...withoutBefore } = credit;
// @ts-expect-error balance_before is required
export const noBefore: Operation = withoutBefore;

export const page: HistoryOk = {
  success: true,
  operations: [credit, setByOperator],
  next_cursor: "000000000000002a5c0b7e61d9a4f3c2b1e08d7a",
};
export const lastPage: HistoryOk = { success: true, operations: [], next_cursor: null };
// @ts-expect-error operations is required
export const noOperations: HistoryOk = { success: true, next_cursor: null };
export const historyInvalid: HistoryBadRequest = {
  success: false,
  code: "VALIDATION_ERROR",
  message: { cursor: "cursor must be a next_cursor given for these same parameters" },
};
export const historyDenied: HistoryForbidden = { success: false, code: "ACCESS_DENIED" };
export const historyNoUser: HistoryNotFound = { success: false, code: "USER_NOT_FOUND" };
export const historyNoServer: HistoryNotFound = { success: false, code: "SERVER_NOT_FOUND" };
export const historyInternal: HistoryInternal = { success: false, code: "INTERNAL_ERROR" };
export const historyBusy: HistoryUnavailable = { success: false, code: "SERVICE_UNAVAILABLE" };

// ------------------------------------------------------------------ a typed call

type ErrorCode =
  | components["schemas"]["AuthErrorCode"]
  | components["schemas"]["OrderNotFoundCode"]
  | components["schemas"]["AlreadyCompletedCode"]
  | components["schemas"]["RequestTimeoutCode"]
  | components["schemas"]["ValidationErrorCode"]
  | components["schemas"]["PayloadTooLargeCode"]
  | components["schemas"]["CompleteFailedCode"]
  | components["schemas"]["CompleteUnavailableCode"];

/** What a webhook handler does with the answer: done, or retry later. */
export async function completeOrder(
  baseUrl: string,
  token: string,
  body: CompleteBody,
): Promise<{ done: true; order: CompleteOk } | { done: false; code: ErrorCode; retry: boolean }> {
  const response = await fetch(`${baseUrl}/v2/payment/order/complete`, {
    method: "POST",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  if (response.status === 200) {
    return { done: true, order: (await response.json()) as CompleteOk };
  }
  const error = (await response.json()) as
    | CompleteBadRequest
    | CompleteForbidden
    | CompleteNotFound
    | CompleteConflict
    | CompleteTimeout
    | CompleteTooLarge
    | CompleteFailed
    | CompleteUnavailable;
  if (error.code === "ORDER_ALREADY_COMPLETED") {
    // A duplicate webhook: already done.
    return { done: false, code: error.code, retry: false };
  }
  if (error.code === "ORDER_CANCELLED") {
    // Cancelled: never credited; retrying cannot change that.
    return { done: false, code: error.code, retry: false };
  }
  return { done: false, code: error.code, retry: response.status >= 500 || response.status === 408 };
}

type CreateErrorCode =
  | components["schemas"]["ValidationErrorCode"]
  | components["schemas"]["AuthErrorCode"]
  | components["schemas"]["BalanceNotFoundCode"]
  | components["schemas"]["RequestTimeoutCode"]
  | components["schemas"]["IdempotencyConflictCode"]
  | components["schemas"]["PayloadTooLargeCode"]
  | components["schemas"]["InternalErrorCode"]
  | components["schemas"]["UnavailableCode"];

/** Creates an order; a retry with the same key never makes a second one. */
export async function createOrder(
  baseUrl: string,
  token: string,
  body: CreateBody,
  key: string,
): Promise<
  { ok: true; order: CreateCreated; replayed: boolean } | { ok: false; code: CreateErrorCode }
> {
  const headers: CreateHeaders = { "Idempotency-Key": key };
  const response = await fetch(`${baseUrl}/v2/payment/order/create`, {
    method: "POST",
    headers: {
      ...headers,
      Authorization: `Bearer ${token}`,
      "Content-Type": "application/json",
    },
    body: JSON.stringify(body),
  });
  if (response.status === 201) {
    const order = (await response.json()) as CreateCreated;
    const replayed = response.headers.get("Idempotent-Replayed") === "true";
    return { ok: true, order, replayed };
  }
  const error = (await response.json()) as
    | CreateBadRequest
    | CreateForbidden
    | CreateNotFound
    | CreateTimeout
    | CreateConflict
    | CreateTooLarge
    | CreateInternal
    | CreateUnavailable;
  return { ok: false, code: error.code };
}

/** Create, complete with the created order's ids, then read where it stands. */
export async function payAndCheck(
  baseUrl: string,
  token: string,
  body: CreateBody,
  key: string,
  paymentId: string,
): Promise<PaymentOrderStatus | undefined> {
  const createdOrder = await createOrder(baseUrl, token, body, key);
  if (!createdOrder.ok) {
    return undefined;
  }
  const { order_id, payment_system } = createdOrder.order;
  await completeOrder(baseUrl, token, { order_id, payment_system, payment_id: paymentId });
  const query: ReadQuery = { order_id };
  const response = await fetch(
    `${baseUrl}/v2/payment/order?${new URLSearchParams(query).toString()}`,
    { headers: { Authorization: `Bearer ${token}` } },
  );
  if (response.status !== 200) {
    return undefined;
  }
  const now = (await response.json()) as ReadOk;
  switch (now.status) {
    case "pending":
    case "completed":
    case "cancelled":
      return now.status;
    default: {
      // Every status is handled above: a new one fails to compile here.
      const unknown: never = now.status;
      return unknown;
    }
  }
}

/** Every operation of a user, following next_cursor. */
export async function allOperations(
  baseUrl: string,
  token: string,
  userId: number,
): Promise<Operation[]> {
  const all: Operation[] = [];
  let cursor: string | null | undefined;
  do {
    const query: HistoryQuery = { user_id: userId, limit: 100 };
    if (cursor) {
      query.cursor = cursor;
    }
    const params = new URLSearchParams(
      Object.entries(query).map(([name, value]): [string, string] => [name, String(value)]),
    );
    const response = await fetch(`${baseUrl}/v2/master-account/operations?${params}`, {
      headers: { Authorization: `Bearer ${token}` },
    });
    const page = (await response.json()) as HistoryOk;
    all.push(...page.operations);
    cursor = page.next_cursor;
  } while (cursor);
  return all;
}
